package lab

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
)

// MachineLate begins a report's note that the machine ran a node late: a
// tick missed its starting deadline on a node no fault touched. The run's
// counts stand (its missed ticks are missed), but a liveness claim (every
// tick ran, a fault found its target) is not one this run can judge.
const MachineLate = "the machine ran the nodes late:"

// Report is the result of a run. Its JSON form is the contract of
// `aegis lab run --json` (docs/design.md section 8). Its top-level counts are
// the sums over its jobs, and Checker is the worst job's verdict.
type Report struct {
	Scenario  string  `json:"scenario"`
	Strategy  string  `json:"strategy"`
	Fenced    bool    `json:"fenced"`
	Nodes     int     `json:"nodes"`
	DurationS float64 `json:"duration_s"`
	// Ticks counts the jobs' ticks: each job's fire times in the run.
	Ticks int `json:"ticks"`
	// Executions counts entries into a critical section: attempts that
	// read a job's ledger.
	Executions int `json:"executions"`
	// DuplicateTicks counts job ticks that more than one attempt entered.
	DuplicateTicks int `json:"duplicate_ticks"`
	// DuplicatesApplied counts job ticks whose effect was committed more
	// than once: the harm.
	DuplicatesApplied int `json:"duplicates_applied"`
	// StaleRejected counts attempts the fence refused, on read or write.
	StaleRejected int `json:"stale_rejected"`
	// MissedTicks counts job ticks nobody executed within their window.
	MissedTicks int `json:"missed_ticks"`
	// LostUpdates is committed effects minus the final ledger values.
	LostUpdates int64 `json:"lost_updates"`
	// Refires counts job ticks run again after they had succeeded: commits
	// whose critical section entered after another commit of the same
	// tick; RetriedRefires those of them by a reaper's retry of a run
	// whose end was lost (or the run it retried).
	Refires        int `json:"refires"`
	RetriedRefires int `json:"retried_refires"`
	// Checker is ok, violation or unknown (a check timed out).
	Checker string `json:"checker"`
	// Verdict is the run's: VerdictHarmed, else VerdictInconclusive when
	// Inconclusive has a reason, else VerdictOK (see Conclude).
	Verdict string `json:"verdict"`
	// Inconclusive says, in words with numbers, why the run proves
	// nothing ("17 of 17 job ticks missed: …"); empty when it proves what
	// it shows. A harmed run keeps its reasons too.
	Inconclusive []string `json:"inconclusive"`
	// Harms lists the harms the run showed (HarmDuplicate, …), from the
	// store and the checker.
	Harms []Harm `json:"harms"`
	// StoreAgrees says whether the checker's verdicts agree with what SQL
	// over the audit and ledger tables says; false is a lab bug, named in
	// Disagreement.
	StoreAgrees  bool   `json:"store_agrees"`
	Disagreement string `json:"disagreement,omitempty"`
	// Unsafe lists the harms the strategy's label excludes that the run
	// showed: the campaign's test.
	Unsafe        []Harm      `json:"unsafe"`
	Run           string      `json:"run"`
	ConfigJSON    ConfigJSON  `json:"config"`
	Jobs          []JobReport `json:"jobs"`
	Visualisation string      `json:"visualisation,omitempty"` // the checker's HTML of the first violating job
	Events        []Event     `json:"events"`

	// Not in the JSON: the readable summary's material.
	Config  Config    `json:"-"`
	Balance int64     `json:"-"` // the sum of the ledgers
	Table   []TickRow `json:"-"`
	// Notes are warnings: a fault that found no holder, a node that did
	// not finish, the second region's account.
	Notes       []string `json:"notes"`
	Unavailable string   `json:"-"` // for a preset's run that could not run: why
}

// JobReport is one job's part of a report.
type JobReport struct {
	Name              string `json:"name"`
	Every             string `json:"every"`
	Work              string `json:"work"`
	Ticks             int    `json:"ticks"`
	Executions        int    `json:"executions"`
	DuplicateTicks    int    `json:"duplicate_ticks"`
	DuplicatesApplied int    `json:"duplicates_applied"`
	// Retries counts the duplicates applied by a reaper's retry of a run
	// that had crashed after its commit.
	Retries     int   `json:"retried_duplicates"`
	LostUpdates int64 `json:"lost_updates"`
	// Refires and RetriedRefires are the report's, for this job.
	Refires        int    `json:"refires"`
	RetriedRefires int    `json:"retried_refires"`
	MissedTicks    int    `json:"missed_ticks"`
	StaleRejected  int    `json:"stale_rejected"`
	Ledger         int64  `json:"ledger"` // the final ledger value
	Checker        string `json:"checker"`
	Reason         string `json:"reason,omitempty"` // the checker's, for a violation
	Harms          []Harm `json:"harms"`
	Visualisation  string `json:"visualisation,omitempty"`
}

// ConfigJSON is a run's configuration in the report: every flag of `aegis
// lab run`, and the chaos list.
type ConfigJSON struct {
	Strategy string   `json:"strategy"`
	Fence    bool     `json:"fence"`
	Nodes    int      `json:"nodes"`
	Standby  int      `json:"standby"`
	Duration string   `json:"duration"`
	Tick     string   `json:"tick"`
	Work     string   `json:"work"`
	TTL      string   `json:"ttl"`
	Catalog  string   `json:"catalog"`
	Chaos    []string `json:"chaos"`
}

// Verdicts of the checker, as a report's checker fields say them.
const (
	CheckOK        = checker.CheckOK
	CheckViolation = checker.CheckViolation
	CheckUnknown   = checker.CheckUnknown
)

// Verdicts of a run, as Report.Verdict says them.
const (
	// VerdictOK: no harm, and the run did what it was meant to test.
	VerdictOK = "ok"
	// VerdictHarmed: the run showed a harm (or the checker a violation),
	// whether or not it is also inconclusive: a harm seen is a proof.
	VerdictHarmed = "harmed"
	// VerdictInconclusive: no harm, but the run proves nothing: a node
	// exited on its configuration, too few ticks executed, a fault found
	// no target, or a job's check ran out of time.
	VerdictInconclusive = "inconclusive"
)

// MinExecutedShare is the share of a run's job ticks that must have
// executed (committed, or entered and then refused by the fence or cut
// short by a fault) for a clean run to count as one: below it, the ticks a
// strategy is judged on (each run once under the faults) mostly did not
// happen. Half, because a fault (a pause past the TTL, a kill, a
// partition) costs a job a tick or a few of the dozen or so a run fires,
// while a run whose nodes cannot run (a refused configuration, a store
// out of reach, a leader paused for most of the run) misses nearly all.
const MinExecutedShare = 0.5

// Conclude sets the run's Verdict and Inconclusive from its counts, its
// harms and its checker verdicts, and from what the runner saw:
// configExits, one line per node that exited on its configuration
// ("node2: why"; nodes with the same why are named together), and unapplied, one line per fault that found no target or
// otherwise did not happen ("pause:holder@1s+2s: …"). Call it once the
// jobs are added.
func (r *Report) Conclude(configExits, unapplied []string) {
	r.Inconclusive = []string{}
	if len(configExits) > 0 {
		// Nodes refuse alike: one reason, with the nodes that gave it.
		var whys []string
		nodes := map[string][]string{}
		for _, e := range configExits {
			node, why, _ := strings.Cut(e, ": ")
			if nodes[why] == nil {
				whys = append(whys, why)
			}
			nodes[why] = append(nodes[why], node)
		}
		for i, why := range whys {
			slices.SortFunc(nodes[why], func(a, b string) int { // node2 before node10
				return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
			})
			whys[i] = strings.Join(nodes[why], ", ") + ": " + why
		}
		r.Inconclusive = append(r.Inconclusive, fmt.Sprintf("%d of %d nodes exited on their configuration (%s)",
			len(configExits), r.Nodes, strings.Join(whys, "; ")))
	}
	executed, entered := r.Ticks-r.MissedTicks, r.enteredMissed()
	switch {
	case r.Ticks == 0:
		r.Inconclusive = append(r.Inconclusive, "no job tick fired")
	case float64(executed+entered) < MinExecutedShare*float64(r.Ticks) && entered > 0:
		r.Inconclusive = append(r.Inconclusive, fmt.Sprintf("%d of %d job ticks missed: %d executed and %d more entered (refused or cut short), fewer than %.0f%%",
			r.MissedTicks, r.Ticks, executed, entered, MinExecutedShare*100))
	case float64(executed+entered) < MinExecutedShare*float64(r.Ticks):
		r.Inconclusive = append(r.Inconclusive, fmt.Sprintf("%d of %d job ticks missed: %d executed, fewer than %.0f%%",
			r.MissedTicks, r.Ticks, executed, MinExecutedShare*100))
	}
	for _, u := range unapplied {
		r.Inconclusive = append(r.Inconclusive, "a fault did not happen: "+u)
	}
	for _, j := range r.Jobs {
		if j.Checker == CheckUnknown {
			r.Inconclusive = append(r.Inconclusive, fmt.Sprintf("the check of %s ran out of time: its history is not judged", j.Name))
		}
	}
	switch {
	case len(r.Harms) > 0 || r.Checker == CheckViolation:
		r.Verdict = VerdictHarmed
	case len(r.Inconclusive) > 0:
		r.Verdict = VerdictInconclusive
	default:
		r.Verdict = VerdictOK
	}
}

// enteredMissed counts the missed ticks of the per-tick table whose
// critical section a node entered: the fence refused it (a fenced run's
// point: after restart:redis every write is refused until the tokens
// pass the fence's), or a fault cut it short.
func (r *Report) enteredMissed() int {
	n := 0
	for _, row := range r.Table {
		entered := slices.ContainsFunc(row.Cells, func(c string) bool { return c != "" })
		if entered && !slices.ContainsFunc(row.Cells, func(c string) bool { return strings.Contains(c, "EXEC") }) {
			n++
		}
	}
	return n
}

// Harm is a kind of harm a run can show.
type Harm string

const (
	// HarmDuplicate: a job's tick committed more than once (overlapping
	// or in sequence).
	HarmDuplicate Harm = "duplicate"
	// HarmRetryDuplicate: a tick committed again by a retry (run attempt 2
	// and up) of a run whose end was lost after its commit: at least once.
	HarmRetryDuplicate Harm = "retried-duplicate"
	// HarmLostUpdate: a committed effect the ledger does not count.
	HarmLostUpdate Harm = "lost-update"
	// HarmStaleAccepted: a write accepted with a token lower than one
	// already accepted, or equal to one from another holder.
	HarmStaleAccepted Harm = "stale-accepted"
	// HarmRefire: a tick run again, and committed, after a run of it had
	// committed, not by a reaper's retry: a second run of one attempt (a
	// lease granted again, a run key claimed again). Every such tick is a
	// duplicate too.
	HarmRefire Harm = "re-fire"
)

// TickRow is one job tick of the per-tick table: what each node did.
type TickRow struct {
	Job   string
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
	fmt.Fprint(tw, "job\ttick")
	for n := 1; n <= r.Nodes; n++ {
		fmt.Fprintf(tw, "\tnode%d", n)
	}
	fmt.Fprint(tw, "\t\n")
	for _, row := range r.Table {
		fmt.Fprintf(tw, "%s\t%d", row.Job, row.Tick)
		for _, c := range row.Cells {
			fmt.Fprintf(tw, "\t%s", cmp.Or(c, "·"))
		}
		fmt.Fprintf(tw, "\t%s\n", row.Note)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	jw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(jw, "job\tevery\tticks\texecutions\tduplicates_applied\trefires\tstale_rejected\tmissed_ticks\tlost_updates\tledger\tchecker\t\n")
	for _, j := range r.Jobs {
		fmt.Fprintf(jw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", j.Name, j.Every, j.Ticks, j.Executions,
			j.DuplicatesApplied, j.Refires, j.StaleRejected, j.MissedTicks, j.LostUpdates, j.Ledger, j.Checker)
	}
	_ = jw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "ticks %d, executions %d, duplicate_ticks %d, duplicates_applied %d, refires %d (retried %d), stale_rejected %d, missed_ticks %d, lost_updates %d\n",
		r.Ticks, r.Executions, r.DuplicateTicks, r.DuplicatesApplied, r.Refires, r.RetriedRefires, r.StaleRejected, r.MissedTicks, r.LostUpdates)
	fmt.Fprintf(w, "checker: %s", r.Checker)
	switch r.Checker {
	case CheckOK:
		fmt.Fprint(w, " (every job's history is linearizable: each tick applied once, no lost update, no stale token accepted)")
	case CheckViolation:
		for _, j := range r.Jobs {
			if j.Checker == CheckViolation {
				fmt.Fprintf(w, "; %s: %s", j.Name, j.Reason)
			}
		}
		if r.Visualisation != "" {
			fmt.Fprintf(w, "; visualisation: %s", r.Visualisation)
		}
	case CheckUnknown:
		fmt.Fprint(w, " (a check timed out)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "verdict: %s", r.Verdict)
	if len(r.Inconclusive) > 0 {
		if r.Verdict != VerdictInconclusive {
			fmt.Fprint(w, " (and inconclusive)")
		}
		fmt.Fprintf(w, ": %s", strings.Join(r.Inconclusive, "; "))
	}
	fmt.Fprintln(w)
	if !r.StoreAgrees {
		fmt.Fprintf(w, "checker disagrees with the store: %s\n", r.Disagreement)
	}
	if len(r.Harms) > 0 {
		fmt.Fprintf(w, "harms: %s", joinHarms(r.Harms))
		if len(r.Unsafe) > 0 {
			fmt.Fprintf(w, " (the strategy's label excludes %s)", joinHarms(r.Unsafe))
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// WriteComparison writes one table of several runs' counts (the aegis
// preset), then each strategy's "does not guarantee" line.
func WriteComparison(w io.Writer, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "strategy\tfenced\tticks\texecutions\tduplicate_ticks\tduplicates_applied\tstale_rejected\tmissed_ticks\tlost_updates\tchecker\tverdict\t\n")
	for _, r := range reports {
		if r.Unavailable != "" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\tunavailable\t\t\n", r.Strategy, fencedWord(r))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Strategy, fencedWord(r), r.Ticks, r.Executions,
			r.DuplicateTicks, r.DuplicatesApplied, r.StaleRejected, r.MissedTicks, r.LostUpdates, r.Checker, r.Verdict)
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
		for _, why := range r.Inconclusive {
			fmt.Fprintf(w, "inconclusive (%s, %s): %s\n", r.Strategy, fencedWord(r), why)
		}
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

func joinHarms(hs []Harm) string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = string(h)
	}
	return strings.Join(out, ", ")
}

// Add adds a job's report to the run's: the sums and the worst verdict.
func (rep *Report) Add(jr JobReport) {
	rep.Jobs = append(rep.Jobs, jr)
	rep.Ticks += jr.Ticks
	rep.Executions += jr.Executions
	rep.DuplicateTicks += jr.DuplicateTicks
	rep.DuplicatesApplied += jr.DuplicatesApplied
	rep.StaleRejected += jr.StaleRejected
	rep.MissedTicks += jr.MissedTicks
	rep.LostUpdates += jr.LostUpdates
	rep.Refires += jr.Refires
	rep.RetriedRefires += jr.RetriedRefires
	rep.Balance += jr.Ledger
	for _, h := range jr.Harms {
		if !slices.Contains(rep.Harms, h) {
			rep.Harms = append(rep.Harms, h)
		}
	}
	rank := map[string]int{"": 0, CheckOK: 1, CheckUnknown: 2, CheckViolation: 3}
	if rank[jr.Checker] > rank[rep.Checker] {
		rep.Checker = jr.Checker
	}
	if rep.Visualisation == "" {
		rep.Visualisation = jr.Visualisation
	}
}
