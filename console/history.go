package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/schedule"
)

// The attempt history and the missed ticks, read through
// schedule.RunReader. schedule.NewStore creates their tables with the run
// table's migrations; a database whose replicas ran an Aegis from before
// them has a run table and neither of these, and the page says so and
// shows the run table instead.
const (
	attemptTable = "aegis_schedule_run_attempt"
	missedTable  = "aegis_schedule_run_missed"
	// historyShown bounds the attempts and the missed ticks a page reads.
	historyShown = 100
	// missedScanned bounds the missed ticks the overview counts.
	missedScanned = 1000
)

// TracePlaceholder is what Config.TraceURL has where an attempt's trace id
// goes.
const TracePlaceholder = "{trace_id}"

// CheckTraceURL says what is wrong with tmpl as a Config.TraceURL, in a
// phrase that follows the setting's name ("has no {trace_id}, …"); nil
// when it is fine or "" (no links). It wants an http or https URL with
// TracePlaceholder and no user or password, which every page would show.
// The phrase does not quote the URL: it is the operator's, and an error
// is printed and logged.
func CheckTraceURL(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	if !strings.Contains(tmpl, TracePlaceholder) {
		return errors.New("has no " + TracePlaceholder + ", where an attempt's trace id goes")
	}
	// A trace id of letters and digits, as links get: with "0" in its
	// place, a placeholder in the port passed, and every link failed.
	u, err := url.Parse(strings.ReplaceAll(tmpl, TracePlaceholder, "4bf92f3577b34da6a3ce929d0e0e4736"))
	switch {
	case err != nil:
		return errors.New("does not parse as a URL")
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errors.New("is not an http or https URL with a host")
	case u.User != nil:
		return errors.New("carries a user or password, which every page would show")
	}
	return nil
}

// traceLink is the link to an attempt's trace: tmpl with the id in place
// of the placeholder; "" without tmpl, or for an id that is not hex (an
// OpenTelemetry trace id is), which is then shown as text only.
func traceLink(tmpl, id string) string {
	notHex := func(r rune) bool { return !strings.ContainsRune("0123456789abcdefABCDEF", r) }
	if tmpl == "" || id == "" || strings.ContainsFunc(id, notHex) {
		return ""
	}
	return strings.ReplaceAll(tmpl, TracePlaceholder, id)
}

// attemptRow is an attempt of a tick as the page shows it.
type attemptRow struct {
	schedule.Attempt
	// Number is Attempt.Attempt, which a template cannot name: there
	// .Attempt is the embedded struct.
	Number int
	// Lost: a later attempt took its tick (lost, or refused when it ran to
	// its end): its tick ran twice.
	Lost bool
	// Trace is the link to its trace, when the console has a TraceURL and
	// the attempt a trace id.
	Trace string
	// Stuck: running, its run row past its lease (the reaper's).
	Stuck bool
}

func newAttemptRows(as []schedule.Attempt, traceURL string) []attemptRow {
	out := make([]attemptRow, 0, len(as))
	for _, a := range as {
		out = append(out, attemptRow{Attempt: a, Number: a.Attempt, Lost: a.Outcome == "lost" || a.Outcome == "refused", Trace: traceLink(traceURL, a.TraceID)})
	}
	return out
}

// history is the attempt history and the missed ticks of a page.
type history struct {
	// NoAttempts and NoMissed are the tables that are missing, when they
	// are.
	NoAttempts, NoMissed string
	// Attempts are those the page's query selects, the newest
	// historyShown, of Total.
	Attempts []attemptRow
	Total    int
	// Trouble, on a page without show or since, is every attempt of the
	// ticks of the last day that ran twice (the newest historyShown, of
	// TroubleTotal), and AppliedTwice those of the ticks applied twice:
	// above the full list, which a frequent schedule's runs fill.
	Trouble      []attemptRow
	TroubleTotal int
	AppliedTwice []attemptRow
	Missed       []schedule.MissedTick
}

// troubleWindow is how far back a page's default list finds the ticks
// that ran twice or were applied twice.
const troubleWindow = 24 * time.Hour

// history reads the attempts that q selects and the missed ticks of its
// job (every job's when it has none), newest tick first, with the links to
// their traces made from traceURL.
func (st *store) history(ctx context.Context, now time.Time, q attemptQuery, traceURL string) (history, error) {
	var h history
	ok, err := st.exists(ctx, attemptTable)
	if err != nil {
		return h, err
	}
	if !ok {
		h.NoAttempts = attemptTable
	} else {
		f := schedule.AttemptFilter{Job: q.Job, Outcome: q.Show, Limit: historyShown}
		if w := windows[q.Since]; w > 0 {
			f.Since = now.Add(-w)
		}
		as, n, err := st.runTable.FindAttempts(ctx, f)
		if err != nil {
			return h, err
		}
		h.Attempts, h.Total = newAttemptRows(as, traceURL), n
		if q.Show == "" && q.Since == "" {
			f := schedule.AttemptFilter{Job: q.Job, Outcome: schedule.RanTwice, Since: now.Add(-troubleWindow), Limit: historyShown}
			if as, h.TroubleTotal, err = st.runTable.FindAttempts(ctx, f); err != nil {
				return h, err
			}
			h.Trouble = newAttemptRows(as, traceURL)
			f.Outcome = schedule.AppliedTwice
			if as, _, err = st.runTable.FindAttempts(ctx, f); err != nil {
				return h, err
			}
			h.AppliedTwice = newAttemptRows(as, traceURL)
		}
	}
	if ok, err = st.exists(ctx, missedTable); err != nil {
		return h, err
	}
	if !ok {
		h.NoMissed = missedTable
	} else if h.Missed, err = st.runTable.Missed(ctx, q.Job, historyShown); err != nil {
		return h, err
	}
	return h, nil
}

// attemptQuery is a schedules page's filter, from its address's
// parameters: show (an outcome, ran-twice or applied-twice), job, since
// (1h, 24h or 7d) and, for the catalog, handler (none: the schedules no
// live replica has a handler for; some: those some live replicas lack).
type attemptQuery struct {
	Show, Job, Since, Handler string
}

// windows are the values of since.
var windows = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}

// parseAttemptQuery reads the page's filter; page is the schedule of a
// schedule's page, which is its job. bad says what is wrong with it.
func parseAttemptQuery(r *http.Request, page string) (q attemptQuery, bad string) {
	v := r.URL.Query()
	q = attemptQuery{Show: v.Get("show"), Job: cmp.Or(page, v.Get("job")), Since: v.Get("since"), Handler: v.Get("handler")}
	switch {
	case q.Show != "" && !slices.Contains(schedule.Outcomes(), q.Show):
		return q, fmt.Sprintf("show=%.40q is not an outcome: want one of %s", q.Show, strings.Join(schedule.Outcomes(), ", "))
	case q.Since != "" && windows[q.Since] == 0:
		return q, fmt.Sprintf("since=%.40q is not a window: want 1h, 24h or 7d", q.Since)
	case q.Handler != "" && q.Handler != "none" && q.Handler != "some":
		return q, fmt.Sprintf("handler=%.40q: want none (the schedules no live replica has a handler for) or some (those some live replicas lack)", q.Handler)
	}
	return q, ""
}

// handles tells whether the catalog's row passes the query's handler.
func (q attemptQuery) handles(r scheduleRow) bool {
	switch q.Handler {
	case "none":
		return r.Unbound()
	case "some":
		return !r.Unbound() && len(r.MissingOn) > 0
	}
	return true
}

// Outcomes are what the page's form offers for show.
func (attemptQuery) Outcomes() []string { return schedule.Outcomes() }

// Windows are what the page's form offers for since.
func (attemptQuery) Windows() []string { return []string{"1h", "24h", "7d"} }

// Describe says what the attempts list shows, and how many of how many.
func (q attemptQuery) Describe(shown, total int) string {
	what := "attempts"
	switch q.Show {
	case "":
	case "lost":
		what = "attempts lost (their lease lost)"
	case "refused":
		what = "attempts refused by the fence"
	case schedule.RanTwice:
		what = "attempts of the ticks that ran twice"
	case schedule.AppliedTwice:
		what = "attempts of the ticks applied twice"
	default:
		what = "attempts " + q.Show
	}
	of := "of every schedule"
	if q.Job != "" {
		of = "of " + q.Job
	}
	window := "on record"
	if q.Since != "" {
		window = "in the last " + strings.Replace(q.Since, "d", " days", 1)
	}
	if shown == total {
		if total == 1 {
			what = strings.Replace(what, "attempts", "attempt", 1)
		}
		return fmt.Sprintf("%d %s %s %s.", total, what, of, window)
	}
	n := fmt.Sprint(total)
	if total >= schedule.CountBound {
		n += " or more" // FindAttempts counts no further
	}
	return fmt.Sprintf("The newest %d of %s %s %s %s.", shown, n, what, of, window)
}

// missedCount is a schedule's missed ticks in the overview's window.
type missedCount struct {
	Job string
	N   int
}

// missedSince counts the missed ticks whose fire time is at or after
// since, by schedule, the most missed first, among the latest
// missedScanned: more is true when there may be more. found is false when
// the missed table is missing.
func (st *store) missedSince(ctx context.Context, since time.Time) (counts []missedCount, more, found bool, err error) {
	if found, err = st.exists(ctx, missedTable); err != nil || !found {
		return nil, false, found, err
	}
	ms, err := st.runTable.Missed(ctx, "", missedScanned)
	if err != nil {
		return nil, false, true, err
	}
	more = len(ms) == missedScanned && !ms[len(ms)-1].Fire.Before(since)
	at := map[string]int{}
	for _, m := range ms {
		if m.Fire.Before(since) {
			continue
		}
		i, ok := at[m.Job]
		if !ok {
			i = len(counts)
			at[m.Job] = i
			counts = append(counts, missedCount{Job: m.Job})
		}
		counts[i].N++
	}
	slices.SortStableFunc(counts, func(a, b missedCount) int {
		return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(a.Job, b.Job))
	})
	return counts, more, true, nil
}
