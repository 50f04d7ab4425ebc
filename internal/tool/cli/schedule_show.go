package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/aegislab/aegis/schedule"
)

// stamp writes t as the CLI shows times: UTC, milliseconds when there are
// any.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.999Z07:00") }

// effectiveText says when e's spec takes or took effect, as of now.
func effectiveText(e schedule.Entry, now time.Time, pending, since string) string {
	if e.EffectiveAt.After(now) {
		return pending + " " + stamp(e.EffectiveAt)
	}
	return since + " " + stamp(e.EffectiveAt)
}

// scheduleJSON is an Entry in `list --json`: the field names are a
// contract.
type scheduleJSON struct {
	Name             string          `json:"name"`
	Namespace        string          `json:"namespace"`
	Spec             string          `json:"spec"`
	Cron             string          `json:"cron"`
	TZ               string          `json:"tz"`
	Every            string          `json:"every"`
	Handler          string          `json:"handler"`
	Args             json.RawMessage `json:"args"`
	Paused           bool            `json:"paused"`
	State            string          `json:"state"`
	Version          int64           `json:"version"`
	EffectiveAt      time.Time       `json:"effective_at"`
	Previous         string          `json:"previous"`
	Misfire          string          `json:"misfire"`
	CatchUpMax       int             `json:"catch_up_max"`
	Overlap          string          `json:"overlap"`
	StartingDeadline string          `json:"starting_deadline"`
	MaxAttempts      int             `json:"max_attempts"`
	LockAtMostFor    string          `json:"lock_at_most_for"`
	LockAtLeastFor   string          `json:"lock_at_least_for"`
	KeepAlive        bool            `json:"keep_alive"`
	Created          time.Time       `json:"created"`
	Updated          time.Time       `json:"updated"`
	Replicas         []string        `json:"replicas"`
	MissingOn        []string        `json:"missing_on"`
}

func stateOf(e schedule.Entry) string {
	if e.Paused {
		return "paused"
	}
	return "enabled"
}

func scheduleList(ctx context.Context, cat *schedule.Catalog, asJSON bool, stdout io.Writer) error {
	es, err := cat.List(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		out := make([]scheduleJSON, 0, len(es))
		for _, e := range es {
			j := scheduleJSON{
				Name: e.Name, Namespace: e.Namespace, Spec: e.Spec(), Cron: e.Cron, TZ: e.TZ, Handler: e.Handler,
				Args: e.Args, Paused: e.Paused, State: stateOf(e), Version: e.Version, EffectiveAt: e.EffectiveAt,
				Previous: e.Previous, Misfire: e.Misfire.String(), CatchUpMax: e.CatchUpMax, Overlap: e.Overlap.String(),
				StartingDeadline: e.StartingDeadline.String(), MaxAttempts: e.MaxAttempts,
				LockAtMostFor: e.LockAtMostFor.String(), LockAtLeastFor: e.LockAtLeastFor.String(), KeepAlive: !e.DisableKeepAlive,
				Created: e.Created, Updated: e.Updated,
				Replicas: append([]string{}, e.Replicas...), MissingOn: append([]string{}, e.MissingOn...),
			}
			if e.Every != 0 {
				j.Every = e.Every.String()
			}
			out = append(out, j)
		}
		return writeJSON(stdout, out)
	}
	if len(es) == 0 {
		fmt.Fprintf(stdout, "no schedules in namespace %q\n", cat.Namespace())
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSPEC\tHANDLER\tSTATE\tVERSION\tEFFECTIVE\tREPLICAS")
	var warnings []string
	for _, e := range es {
		effective := effectiveText(e, now, "at", "since")
		if e.Previous != "" && e.EffectiveAt.After(now) {
			effective += " (until then " + e.Previous + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Name, e.Spec(), e.Handler, stateOf(e), e.Version, effective, replicasText(e))
		switch {
		case len(e.MissingOn) > 0 && len(e.Replicas) == 0:
			warnings = append(warnings, fmt.Sprintf("warning: %s does not run: no live replica has handler %q (missing on %s)", e.Name, e.Handler, strings.Join(e.MissingOn, ", ")))
		case len(e.MissingOn) > 0:
			warnings = append(warnings, fmt.Sprintf("warning: %s: handler %q is missing on %s (its ticks run on the others)", e.Name, e.Handler, strings.Join(e.MissingOn, ", ")))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(stdout, w)
	}
	return nil
}

// replicasText is how many live replicas have e's handler, of how many.
func replicasText(e schedule.Entry) string {
	switch n := len(e.Replicas) + len(e.MissingOn); {
	case n == 0:
		return "no live replica"
	case len(e.Replicas) == 0:
		return "none has handler " + e.Handler
	default:
		return fmt.Sprintf("%d/%d", len(e.Replicas), n)
	}
}

// runJSON is a RunRecord in `runs --json`: the field names are a contract.
type runJSON struct {
	Job       string     `json:"job"`
	Namespace string     `json:"namespace"`
	Fire      time.Time  `json:"fire"`
	Node      string     `json:"node"`
	Token     int64      `json:"token"`
	Attempt   int        `json:"attempt"`
	Outcome   string     `json:"outcome"` // RunRecord.State
	Started   time.Time  `json:"started"`
	Ended     *time.Time `json:"ended"` // null while running
	Error     string     `json:"error"`
}

func scheduleRuns(ctx context.Context, store *schedule.Store, name string, f scheduleFlags, stdout io.Writer) error {
	runs, err := store.Runs(ctx, name, f.limit)
	if err != nil {
		return err
	}
	if f.json {
		out := make([]runJSON, 0, len(runs))
		for _, r := range runs {
			j := runJSON{Job: r.Job, Namespace: f.ns, Fire: r.Fire, Node: r.Node, Token: int64(r.Token), Attempt: r.Attempt,
				Outcome: r.State, Started: r.Started, Error: r.Error}
			if !r.Ended.IsZero() {
				j.Ended = &r.Ended
			}
			out = append(out, j)
		}
		return writeJSON(stdout, out)
	}
	if len(runs) == 0 {
		fmt.Fprintf(stdout, "no runs of %q in namespace %q\n", name, f.ns)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "FIRE\tNODE\tTOKEN\tATTEMPT\tSTARTED\tENDED\tOUTCOME")
	for _, r := range runs {
		ended := "-"
		if !r.Ended.IsZero() {
			ended = stamp(r.Ended)
		}
		outcome := r.State
		if r.Error != "" {
			outcome += ": " + oneLine(r.Error, 120)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", stamp(r.Fire), r.Node, r.Token, r.Attempt, stamp(r.Started), ended, outcome)
	}
	return tw.Flush()
}

// oneLine is s on one line of at most n runes: a handler's error can be
// long, and --json has it whole.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
