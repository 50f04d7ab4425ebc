package console

import (
	"cmp"
	"context"
	"errors"
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
	// its end: the tick ran twice).
	Lost bool
	// Trace is the link to its trace, when the console has a TraceURL and
	// the attempt a trace id.
	Trace string
	// Stuck: running, its run row past its lease (the reaper's).
	Stuck bool
}

// history is the attempt history and the missed ticks of a page.
type history struct {
	// NoAttempts and NoMissed are the tables that are missing, when they
	// are.
	NoAttempts, NoMissed string
	Attempts             []attemptRow
	Missed               []schedule.MissedTick
}

// history reads job's attempts and missed ticks (every job's when job is
// ""), newest tick first, with the links to their traces made from
// traceURL.
func (st *store) history(ctx context.Context, job, traceURL string) (history, error) {
	var h history
	ok, err := st.exists(ctx, attemptTable)
	if err != nil {
		return h, err
	}
	if !ok {
		h.NoAttempts = attemptTable
	} else {
		as, err := st.runTable.Attempts(ctx, job, historyShown)
		if err != nil {
			return h, err
		}
		for _, a := range as {
			h.Attempts = append(h.Attempts, attemptRow{Attempt: a, Number: a.Attempt, Lost: a.Outcome == "lost" || a.Outcome == "refused", Trace: traceLink(traceURL, a.TraceID)})
		}
	}
	if ok, err = st.exists(ctx, missedTable); err != nil {
		return h, err
	}
	if !ok {
		h.NoMissed = missedTable
	} else if h.Missed, err = st.runTable.Missed(ctx, job, historyShown); err != nil {
		return h, err
	}
	return h, nil
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
