package lab

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is the result of a run. Its JSON form is the contract of
// `aegis lab run --json` (DESIGN.md section 8): exactly these fields.
type Report struct {
	Scenario  string  `json:"scenario"`
	Strategy  string  `json:"strategy"`
	Fenced    bool    `json:"fenced"`
	Nodes     int     `json:"nodes"`
	DurationS float64 `json:"duration_s"`
	Ticks     int     `json:"ticks"`
	// Executions counts entries into the critical section: attempts that
	// read the balance.
	Executions int `json:"executions"`
	// DuplicateTicks counts ticks that more than one attempt entered.
	DuplicateTicks int `json:"duplicate_ticks"`
	// DuplicatesApplied counts ticks whose effect was committed more than
	// once: the harm.
	DuplicatesApplied int `json:"duplicates_applied"`
	// StaleRejected counts attempts the fence refused, on read or write.
	StaleRejected int `json:"stale_rejected"`
	// MissedTicks counts ticks nobody executed within their window.
	MissedTicks int `json:"missed_ticks"`
	// LostUpdates is committed effects minus the final balance.
	LostUpdates int64 `json:"lost_updates"`
	// Checker is ok, violation or unknown (the check timed out).
	Checker string  `json:"checker"`
	Events  []Event `json:"events"`

	// Not in the JSON: the readable summary's material.
	Config        Config    `json:"-"`
	Visualisation string    `json:"-"` // the checker's HTML, on a violation
	Balance       int64     `json:"-"`
	Table         []TickRow `json:"-"`
	Notes         []string  `json:"-"` // warnings: a fault that found no holder, a node that did not finish
	Attempts      []Attempt `json:"-"`
	Unavailable   string    `json:"-"` // for a preset's run that could not run: why
}

// TickRow is one tick of the per-tick table: what each node did.
type TickRow struct {
	Tick  int
	Cells []string // per node: "EXEC t7", "STALE t7", "ENTER t7" (no outcome), "" nothing
	Note  string   // "duplicate applied", "missed", "stale refused", …
}

// WriteSummary writes the readable summary: the run, what the strategy
// does not guarantee, the per-tick table, and the counts.
func (r *Report) WriteSummary(w io.Writer) error {
	s, _ := LookupStrategy(r.Strategy)
	title := "aegis lab run"
	if r.Scenario != "" {
		title += " (scenario " + r.Scenario + ")"
	}
	fmt.Fprintf(w, "%s: %s\n", title, r.Config)
	fmt.Fprintf(w, "%s does not guarantee %s.\n", s.Name, s.NotGuaranteed)
	if r.Unavailable != "" {
		fmt.Fprintf(w, "unavailable: %s\n", r.Unavailable)
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprint(tw, "tick")
	for n := 1; n <= r.Nodes; n++ {
		fmt.Fprintf(tw, "\tnode%d", n)
	}
	fmt.Fprint(tw, "\t\n")
	for _, row := range r.Table {
		fmt.Fprintf(tw, "%d", row.Tick)
		for _, c := range row.Cells {
			fmt.Fprintf(tw, "\t%s", cmp.Or(c, "·"))
		}
		fmt.Fprintf(tw, "\t%s\n", row.Note)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "ticks %d, executions %d, duplicate_ticks %d, duplicates_applied %d, stale_rejected %d, missed_ticks %d, lost_updates %d, balance %d\n",
		r.Ticks, r.Executions, r.DuplicateTicks, r.DuplicatesApplied, r.StaleRejected, r.MissedTicks, r.LostUpdates, r.Balance)
	fmt.Fprintf(w, "checker: %s", r.Checker)
	switch r.Checker {
	case CheckOK:
		fmt.Fprint(w, " (the balance's history is linearizable as a fenced counter)")
	case CheckViolation:
		fmt.Fprint(w, " (two critical sections overlapped: no order explains the balance)")
		if r.Visualisation != "" {
			fmt.Fprintf(w, "; visualisation: %s", r.Visualisation)
		}
	case CheckUnknown:
		fmt.Fprint(w, " (the check timed out)")
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// WriteComparison writes one table of several runs' counts (the aegis
// preset), then each strategy's "does not guarantee" line.
func WriteComparison(w io.Writer, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "strategy\tfenced\tticks\texecutions\tduplicate_ticks\tduplicates_applied\tstale_rejected\tmissed_ticks\tlost_updates\tchecker\t\n")
	for _, r := range reports {
		if r.Unavailable != "" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\tunavailable\t\n", r.Strategy, fencedWord(r))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Strategy, fencedWord(r), r.Ticks, r.Executions,
			r.DuplicateTicks, r.DuplicatesApplied, r.StaleRejected, r.MissedTicks, r.LostUpdates, r.Checker)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	var seen []string
	for _, r := range reports {
		if slices.Contains(seen, r.Strategy) {
			continue
		}
		seen = append(seen, r.Strategy)
		s, _ := LookupStrategy(r.Strategy)
		fmt.Fprintf(w, "%-11s does not guarantee %s.\n", s.Name, s.NotGuaranteed)
	}
	var unavailable []string
	for _, r := range reports {
		if r.Unavailable != "" && !slices.Contains(unavailable, r.Strategy+": "+r.Unavailable) {
			unavailable = append(unavailable, r.Strategy+": "+r.Unavailable)
		}
	}
	if len(unavailable) > 0 {
		fmt.Fprintf(w, "\nunavailable:\n  %s\n", strings.Join(unavailable, "\n  "))
	}
	for _, r := range reports {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "note (%s, %s): %s\n", r.Strategy, fencedWord(r), n)
		}
		if r.Visualisation != "" {
			fmt.Fprintf(w, "violation (%s, %s): %s\n", r.Strategy, fencedWord(r), r.Visualisation)
		}
	}
	return nil
}

func fencedWord(r *Report) string {
	s, _ := LookupStrategy(r.Strategy)
	switch {
	case !s.Fenceable():
		return "n/a"
	case r.Fenced:
		return "yes"
	}
	return "no"
}
