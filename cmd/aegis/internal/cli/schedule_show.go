package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
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
	// Error says why the catalog could not read the row (State
	// "unreadable"); the other fields are then empty.
	Error string `json:"error,omitempty"`
}

func stateOf(e schedule.Entry) string {
	if e.Paused {
		return "paused"
	}
	return "enabled"
}

// scheduleList prints the namespace's schedules. A row the catalog cannot
// read is listed as unreadable, with why, among the others (by name), and
// the exit status is 1.
func scheduleList(ctx context.Context, cat *schedule.Catalog, asJSON bool, stdout io.Writer) error {
	es, err := cat.List(ctx)
	var bad *schedule.BadRowsError
	if err != nil && !errors.As(err, &bad) {
		return err
	}
	var badRows []schedule.RowError
	var badErr error
	if bad != nil {
		badRows = bad.Rows
		s := "s"
		if len(badRows) == 1 {
			s = ""
		}
		badErr = fmt.Errorf("%d catalog row%s of namespace %q cannot be read (listed as unreadable)", len(badRows), s, cat.Namespace())
	}
	// The entries and the bad rows, by name, as List orders each.
	type item struct {
		e   *schedule.Entry
		bad *schedule.RowError
	}
	items := make([]item, 0, len(es)+len(badRows))
	for i := range es {
		items = append(items, item{e: &es[i]})
	}
	for i := range badRows {
		items = append(items, item{bad: &badRows[i]})
	}
	name := func(it item) string {
		if it.e != nil {
			return it.e.Name
		}
		return it.bad.Name
	}
	slices.SortStableFunc(items, func(a, b item) int { return strings.Compare(name(a), name(b)) })
	if asJSON {
		out := make([]scheduleJSON, 0, len(items))
		for _, it := range items {
			if it.bad != nil {
				out = append(out, scheduleJSON{Name: it.bad.Name, Namespace: cat.Namespace(), State: "unreadable", Error: it.bad.Err.Error(),
					Replicas: []string{}, MissingOn: []string{}})
				continue
			}
			e := *it.e
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
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
		return badErr
	}
	if len(items) == 0 {
		fmt.Fprintf(stdout, "no schedules in namespace %q\n", cat.Namespace())
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSPEC\tHANDLER\tSTATE\tVERSION\tEFFECTIVE\tREPLICAS")
	var warnings []string
	var unreadable []string
	for _, it := range items {
		if it.bad != nil {
			// After the table: the reason is too long for a column.
			fmt.Fprintf(tw, "%s\t-\t-\tunreadable\t-\t-\t-\n", shown(it.bad.Name))
			unreadable = append(unreadable, fmt.Sprintf("%s  unreadable: %s", shown(it.bad.Name), shown(it.bad.Err.Error())))
			continue
		}
		e := *it.e
		effective := effectiveText(e, now, "at", "since")
		if e.Previous != "" && e.EffectiveAt.After(now) {
			effective += " (until then " + shown(e.Previous) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", shown(e.Name), shown(e.Spec()), shown(e.Handler), stateOf(e), e.Version, effective, replicasText(e))
		switch {
		case len(e.MissingOn) > 0 && len(e.Replicas) == 0:
			warnings = append(warnings, fmt.Sprintf("warning: %s does not run: no live replica has handler %q (missing on %s)", shown(e.Name), e.Handler, shownList(e.MissingOn)))
		case len(e.MissingOn) > 0:
			warnings = append(warnings, fmt.Sprintf("warning: %s: handler %q is missing on %s (its ticks run on the others)", shown(e.Name), e.Handler, shownList(e.MissingOn)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range unreadable {
		fmt.Fprintln(stdout, u)
	}
	for _, w := range warnings {
		fmt.Fprintln(stdout, w)
	}
	return badErr
}

// replicasText is how many live replicas have e's handler, of how many.
func replicasText(e schedule.Entry) string {
	switch n := len(e.Replicas) + len(e.MissingOn); {
	case n == 0:
		return "no live replica"
	case len(e.Replicas) == 0:
		return "none has handler " + shown(e.Handler)
	default:
		return fmt.Sprintf("%d/%d", len(e.Replicas), n)
	}
}

// runJSON is an attempt or a missed tick in `runs --json`: the field
// names are a contract.
type runJSON struct {
	Job       string     `json:"job"`
	Namespace string     `json:"namespace"`
	Fire      time.Time  `json:"fire"`
	Node      string     `json:"node"` // of a missed tick: the replica that recorded it
	Token     int64      `json:"token"`
	Attempt   int        `json:"attempt"`
	Outcome   string     `json:"outcome"` // Attempt.Outcome, or "missed"
	Started   *time.Time `json:"started"` // the claim; null for a missed tick
	Ended     *time.Time `json:"ended"`   // null while running
	Error     string     `json:"error"`
	Cause     string     `json:"cause,omitempty"`    // of a missed tick
	Detail    string     `json:"detail,omitempty"`   // of a missed tick
	TraceID   string     `json:"trace_id,omitempty"` // the run's trace, when its scheduler traced it
}

// scheduleRuns prints name's latest attempts and missed ticks, newest tick
// first, at most --limit in all.
func scheduleRuns(ctx context.Context, reader *schedule.RunReader, name string, f scheduleFlags, stdout io.Writer) error {
	as, err := reader.Attempts(ctx, name, f.limit)
	if err != nil {
		return err
	}
	ms, err := reader.Missed(ctx, name, f.limit)
	if err != nil {
		return err
	}
	var out []runJSON
	for _, a := range as {
		j := runJSON{Job: a.Job, Namespace: f.ns, Fire: a.Fire.UTC(), Node: a.Node, Token: int64(a.Token), Attempt: a.Attempt,
			Outcome: a.Outcome, Started: &a.Claimed, Error: a.Error, TraceID: a.TraceID}
		if !a.Ended.IsZero() {
			j.Ended = &a.Ended
		}
		out = append(out, j)
	}
	for _, m := range ms {
		out = append(out, runJSON{Job: m.Job, Namespace: f.ns, Fire: m.Fire.UTC(), Node: m.Node, Outcome: "missed", Cause: string(m.Cause), Detail: m.Detail})
	}
	// Newest tick first; a tick's attempts newest first (as read).
	slices.SortStableFunc(out, func(a, b runJSON) int { return b.Fire.Compare(a.Fire) })
	out = out[:min(len(out), f.limit)]
	if f.json {
		if out == nil {
			out = []runJSON{}
		}
		return writeJSON(stdout, out)
	}
	if len(out) == 0 {
		fmt.Fprintf(stdout, "no runs of %q in namespace %q\n", name, f.ns)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "FIRE\tNODE\tTOKEN\tATTEMPT\tSTARTED\tENDED\tOUTCOME")
	for _, r := range out {
		if r.Outcome == "missed" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\tmissed (%s): %s\n", stamp(r.Fire), shown(r.Node), shown(r.Cause), shown(oneLine(r.Detail, 120)))
			continue
		}
		ended := "-"
		if r.Ended != nil {
			ended = stamp(*r.Ended)
		}
		outcome := shown(r.Outcome)
		if r.Error != "" {
			outcome += ": " + shown(oneLine(r.Error, 120))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", stamp(r.Fire), shown(r.Node), r.Token, r.Attempt, stamp(*r.Started), ended, outcome)
	}
	return tw.Flush()
}

// shown is a value from the store or the command line as text output
// prints it: as it is, unless it has a character a terminal would act on
// (an escape sequence, a carriage return, a bidirectional override) or is
// not UTF-8, then quoted as %q does. --json needs none of this: JSON
// escapes control characters.
func shown(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// shownList is names, each shown, joined by ", ".
func shownList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shown(n)
	}
	return strings.Join(out, ", ")
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
