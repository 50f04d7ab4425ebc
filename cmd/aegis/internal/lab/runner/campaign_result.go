package runner

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// A campaign's result: a row per strategy, tallied from its runs' reports,
// and the table and JSON that show it.

// CampaignResult is what a campaign found. Its JSON form is the output of
// `aegis lab campaign --json`.
type CampaignResult struct {
	Seed       uint64            `json:"seed"`
	Runs       int               `json:"runs"` // per strategy
	Strategies []*StrategyResult `json:"strategies"`
	DurationS  float64           `json:"duration_s"`
}

// StrategyResult is one strategy's row of a campaign.
type StrategyResult struct {
	Strategy string `json:"strategy"`
	// Fenced is whether its runs wrote through the fence (false for a
	// strategy without a token).
	Fenced bool `json:"fenced"`
	// LabelledSafe: the lab claims no harm reaches the store with this
	// strategy, so an unsafe run fails the campaign.
	LabelledSafe bool `json:"labelled_safe"`
	Runs         int  `json:"runs"`
	// Harmed counts runs with a harm; Agree runs whose checker verdict
	// agreed with the store.
	Harmed int `json:"harmed"`
	// Unsafe counts runs with a harm the strategy's label excludes in that
	// run (Strategy.Excludes): a run that refutes the label.
	Unsafe int `json:"unsafe"`
	Agree  int `json:"agree"`
	// Inconclusive counts runs that proved nothing and showed no harm
	// (lab.VerdictInconclusive): not counted as clean.
	Inconclusive int `json:"inconclusive"`
	// Refires counts its runs' re-fires (ticks run again after they had
	// committed); RefiresExcluded those of them its label excludes in
	// their run: 0 for a strategy labelled safe, or its run is unsafe.
	Refires         int `json:"refires"`
	RefiresExcluded int `json:"refires_excluded"`
	// Guarantee is what the label claims.
	Guarantee string `json:"guarantee"`
	// Harms counts the runs that showed each harm.
	Harms      map[string]int `json:"harms"`
	HarmedRuns []HarmedRun    `json:"harmed_runs"`
	// InconclusiveRuns are the inconclusive runs, with why.
	InconclusiveRuns []InconclusiveRun `json:"inconclusive_runs"`
	// Skipped says why the strategy did not run, "" when it did.
	Skipped string `json:"skipped,omitempty"`
	// Reports are the runs' reports, in the order drawn.
	Reports []*lab.Report `json:"-"`
}

// HarmedRun is a run that did harm, with the command line that replays it.
type HarmedRun struct {
	Command string   `json:"command"`
	Harms   []string `json:"harms"`
	// Excluded are the harms the strategy's label excludes; Disagreement
	// the checker's disagreement with the store, if any.
	Excluded     []string   `json:"excluded"`
	Disagreement string     `json:"disagreement,omitempty"`
	Config       lab.Config `json:"-"`
}

// InconclusiveRun is a run that proved nothing, with the command line that
// replays it and the report's reasons.
type InconclusiveRun struct {
	Command string     `json:"command"`
	Reasons []string   `json:"reasons"`
	Config  lab.Config `json:"-"`
}

// CampaignRun is one run of a campaign as it ends, for progress lines.
type CampaignRun struct {
	N, Of  int // this is the Nth run to end of Of
	Config lab.Config
	Report *lab.Report
	Harms  []string
	Agree  bool
}

// Refuted returns the strategies that had a run with a harm their label
// excludes, or a run whose checker disagreed with the store (a lab bug):
// the campaign's failure.
func (r *CampaignResult) Refuted() []*StrategyResult {
	var out []*StrategyResult
	for _, s := range r.Strategies {
		if s.Unsafe > 0 || s.Agree < s.Runs {
			out = append(out, s)
		}
	}
	return out
}

// DefaultMaxInconclusive is the share of a campaign's runs that may be
// inconclusive before the campaign fails (aegis lab campaign
// --max-inconclusive): a run now and then whose faults left nothing to
// test is the draw's luck; more means the campaign tests less than its
// table claims.
const DefaultMaxInconclusive = 0.10

// TooInconclusive says, in a line, that more than max (a share, 0 to 1) of
// the campaign's runs were inconclusive, naming the strategies they came
// from; "" when they were not.
func (r *CampaignResult) TooInconclusive(max float64) string {
	n, of := 0, 0
	var rows []string
	for _, s := range r.Strategies {
		n += s.Inconclusive
		of += s.Runs
		if s.Inconclusive > 0 {
			rows = append(rows, fmt.Sprintf("%s %d of %d", s.Strategy, s.Inconclusive, s.Runs))
		}
	}
	if of == 0 || float64(n) <= max*float64(of) {
		return ""
	}
	return fmt.Sprintf("%d of %d runs inconclusive, more than %s: they prove nothing (%s)", n, of, percent(max), strings.Join(rows, ", "))
}

// percent is a share as the flag takes it: 10%, 2.5%.
func percent(share float64) string {
	return strconv.FormatFloat(share*100, 'f', -1, 64) + "%"
}

// tally counts the row's runs from its reports.
func (row *StrategyResult) tally() {
	for _, rep := range row.Reports {
		if rep == nil {
			continue
		}
		if rep.Unavailable != "" { // the session lost a server after Availability
			row.Skipped = rep.Unavailable
			continue
		}
		row.Runs++
		row.Refires += rep.Refires
		row.RefiresExcluded += excludedRefires(rep)
		harms, excluded, agree := judgeRun(rep)
		if agree {
			row.Agree++
		}
		for _, h := range harms {
			row.Harms[h]++
		}
		if len(excluded) > 0 {
			row.Unsafe++
		}
		if len(harms) > 0 || !agree {
			row.Harmed++
			row.HarmedRuns = append(row.HarmedRuns, HarmedRun{Command: replayCommand(rep.Config), Harms: harms, Excluded: excluded, Disagreement: rep.Disagreement, Config: rep.Config})
		}
		if rep.Verdict == lab.VerdictInconclusive {
			row.Inconclusive++
			row.InconclusiveRuns = append(row.InconclusiveRuns, InconclusiveRun{Command: replayCommand(rep.Config), Reasons: rep.Inconclusive, Config: rep.Config})
		}
	}
}

// excludedRefires counts the re-fires of a run its strategy's label
// excludes: the fresh ones where it excludes re-fires, the retried ones
// where it excludes retried duplicates.
func excludedRefires(rep *lab.Report) int {
	s, ok := lab.LookupStrategy(rep.Strategy)
	if !ok {
		return 0
	}
	excluded, n := s.Excludes(rep.Config), 0
	if slices.Contains(excluded, lab.HarmRefire) {
		n += rep.Refires - rep.RetriedRefires
	}
	if slices.Contains(excluded, lab.HarmRetryDuplicate) {
		n += rep.RetriedRefires
	}
	return n
}

// refiresCell is a row's re-fires, as the table shows them: their number,
// and for a strategy labelled safe how many of them its label allows (a
// reaper's retry of a run whose end was lost, or a run whose clocks were
// set further apart than LockAtLeastFor).
func (row *StrategyResult) refiresCell() string {
	cell := fmt.Sprint(row.Refires)
	if allowed := row.Refires - row.RefiresExcluded; row.LabelledSafe && allowed > 0 {
		cell += fmt.Sprintf(" (%d allowed)", allowed)
	}
	return cell
}

// WriteTable writes the campaign's table (strategy, fenced, whether the
// lab labels it safe, runs, unsafe runs, checker/store agreement,
// re-fires, harms),
// then each unsafe run's replay command line and the strategies skipped.
func (r *CampaignResult) WriteTable(w io.Writer) error {
	total, inconclusive := 0, 0
	for _, s := range r.Strategies {
		total += s.Runs
		inconclusive += s.Inconclusive
	}
	fmt.Fprintf(w, "aegis lab campaign --seed %d --runs %d: %d runs in %s, %d inconclusive\n\n", r.Seed, r.Runs, total, time.Duration(r.DurationS*float64(time.Second)).Round(time.Second), inconclusive)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprint(tw, "strategy\tfenced\tguarantee\truns\tharmed\tunsafe\tagree\tinconclusive\tre-fires\tharms\n")
	for _, s := range r.Strategies {
		st, _ := lab.LookupStrategy(s.Strategy)
		fenced := map[bool]string{true: "yes", false: "no"}[s.Fenced]
		if !st.Fenceable() {
			fenced = "n/a"
		}
		if s.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\tskipped\t\t\t\t\t\t\n", s.Strategy, fenced, s.Guarantee)
			continue
		}
		var harms []string
		for _, h := range []lab.Harm{lab.HarmDuplicate, lab.HarmRetryDuplicate, lab.HarmRefire, lab.HarmLostUpdate, lab.HarmStaleAccepted} {
			if n := s.Harms[string(h)]; n > 0 {
				harms = append(harms, fmt.Sprintf("%s %d", h, n))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", s.Strategy, fenced, s.Guarantee, s.Runs, s.Harmed, s.Unsafe, s.Agree, s.Inconclusive, s.refiresCell(), strings.Join(harms, ", "))
	}
	_ = tw.Flush()
	header := "\nruns with a harm, each replayed by its command line:\n"
	for _, s := range r.Strategies {
		for _, u := range s.HarmedRuns {
			what := strings.Join(u.Harms, ", ")
			if len(u.Excluded) > 0 {
				what += "; the label excludes " + strings.Join(u.Excluded, ", ")
			}
			if u.Disagreement != "" {
				what += "; checker disagrees with the store: " + u.Disagreement
			}
			fmt.Fprintf(w, "%s  %s (%s)\n    %s\n", header, s.Strategy, what, u.Command)
			header = ""
		}
	}
	header = "\ninconclusive runs (they prove nothing), each replayed by its command line:\n"
	for _, s := range r.Strategies {
		for _, u := range s.InconclusiveRuns {
			fmt.Fprintf(w, "%s  %s (%s)\n    %s\n", header, s.Strategy, strings.Join(u.Reasons, "; "), u.Command)
			header = ""
		}
	}
	header = "\nskipped:\n"
	for _, s := range r.Strategies {
		if s.Skipped != "" {
			fmt.Fprintf(w, "%s  %s: %s\n", header, s.Strategy, s.Skipped)
			header = ""
		}
	}
	return nil
}
