package runner_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// The safety argument the dashboard draws comes from the events: a
// refusal names the token the store held (read from the store, so it is
// a token another section of the job registered before), for each token
// kind; a lease's or run row's acquired and renewed events say when it
// expires on the store. One job every tick, its holder paused for twice the TTL: a
// successor is granted the job (or a reaper retries the tick) and reads
// with a greater token before the holder resumes and writes.
func TestRefusalsAndLeaseLifetimes(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"pg-lease", "pg-unique", "queue", "optimistic"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			c := short(strategy, true, "pause:holder@500ms+1200ms")
			c.Catalog = catalog(t, "export=400ms/300ms")
			rep, st := run(t, session(t), c)
			requireLabelKept(t, rep, st)
			requireFaultOutcome(t, rep, st, "paused with SIGSTOP", true)

			secs := sections(rep)
			stale := 0
			for _, e := range rep.Events {
				if e.Kind != lab.EventStale {
					continue
				}
				stale++
				require.Positive(t, e.Held, "stale %s (token %d): the token the store held", e.Attempt, e.Token)
				require.GreaterOrEqual(t, e.Held, e.Token, "stale %s: the store refused a token below the one it held", e.Attempt)
				// Registered by a section's read, or (optimistic) by a claim,
				// which moves the job's version itself.
				registered := false
				for _, s := range secs {
					registered = registered || (s.attempt != e.Attempt && s.job == e.Job && s.token == e.Held && s.entered >= 0 && s.entered <= e.T)
				}
				for _, c := range rep.Events {
					registered = registered || (c.Kind == lab.EventClaimed && c.Job == e.Job && c.Token == e.Held && c.T <= e.T)
				}
				require.True(t, registered, "stale %s at %.3fs: the token the store held, %d, was registered by another section of %s before", e.Attempt, e.T, e.Held, e.Job)
				require.Contains(t, e.Detail, "refused, the store holds")
			}
			// Another node's commit of the paused holder's job with a greater
			// token before the holder's write ends forces the refusal (on a
			// loaded machine the others may commit nothing meanwhile).
			if successorCommitted(rep) {
				require.Positive(t, stale, "the paused holder's write was refused")
			}

			if strategy == "queue" {
				return // a queue job's lease is the queue's: the scheduler does not see it
			}
			ttl := rep.Config.TTL.Seconds() // the run's: a rerun on a slower clock has its own
			acquired, renewed := 0, 0
			until := map[string]float64{} // job/tick/token → the expiry last reported
			key := func(e lab.Event) string { return fmt.Sprintf("%s/%d/%d", e.Job, e.Tick, e.Token) }
			for _, e := range rep.Events {
				switch e.Kind {
				case lab.EventAcquired:
					acquired++
					fired := float64(e.Tick-1) * rep.Config.Tick.Seconds()
					require.GreaterOrEqual(t, e.Until, fired+ttl-0.001, "acquired %s tick %d: the grant began after the tick fired", e.Job, e.Tick)
					require.LessOrEqual(t, e.Until, e.T+ttl+0.001, "acquired %s tick %d at %.3fs: it expires TTL after the grant began", e.Job, e.Tick, e.T)
					until[key(e)] = e.Until
				case lab.EventRenewed:
					renewed++
					prev, ok := until[key(e)]
					require.True(t, ok, "renewed %s tick %d token %d: a lease acquired before", e.Job, e.Tick, e.Token)
					require.Greater(t, e.Until, prev, "renewed %s tick %d: the renewal moves the expiry on", e.Job, e.Tick)
					require.LessOrEqual(t, e.Until, e.T+ttl+0.001, "renewed %s tick %d at %.3fs", e.Job, e.Tick, e.T)
					until[key(e)] = e.Until
				}
			}
			require.Positive(t, acquired)
			require.Positive(t, renewed, "work of 300 ms under a 600 ms TTL renews at 200 ms")
		})
	}
}

// An edit that names a job not in the catalog adds it while the run goes
// on: every node's binder picks the row up, its ticks run from the time
// the row takes effect, and the report lists it, checked and recounted
// from the store like the others.
func TestEditAddsASchedule(t *testing.T) {
	t.Parallel()
	c := short("pg-lease", true, "edit:nightly@400ms=800ms/100ms")
	c.Duration = 10 * c.Tick
	rep, st := run(t, session(t), c)
	requireLabelKept(t, rep, st)
	added := chaosEvent(t, rep.Events, lab.EventChaos, "nightly added to the catalog")
	require.Equal(t, "nightly", added.Job)

	var jr *lab.JobReport
	for i := range rep.Jobs {
		if rep.Jobs[i].Name == "nightly" {
			jr = &rep.Jobs[i]
		}
	}
	require.NotNil(t, jr, "the report lists the added job: %+v", rep.Jobs)
	require.Positive(t, jr.Ticks, "nightly fired after it was added")
	require.Positive(t, jr.Executions, "and ran")
	require.Equal(t, lab.CheckOK, jr.Checker)
	// A tick of it may be missed on a loaded machine (a misfire, or every
	// node finding the key held, which the nodes do not report): the
	// ledger still counts exactly the ticks that ran.
	require.Less(t, jr.MissedTicks, jr.Ticks, "not every tick of nightly was missed")
	require.Equal(t, int64(jr.Ticks-jr.MissedTicks), jr.Ledger, "its ledger counts each of its ticks run")
	require.True(t, rep.StoreAgrees, "the checker agrees with SQL over the audit table")
	require.Len(t, rep.Jobs, 4, "the catalog's three jobs and the added one")
	for _, e := range rep.Events {
		if e.Job == "nightly" && e.Kind == lab.EventEntered {
			require.Greater(t, e.T, added.T, "nightly runs only after it was added")
		}
	}
}

// successorCommitted reports whether, while the paused holder was inside
// its section, another node committed the same job with a greater token.
func successorCommitted(rep *lab.Report) bool {
	node, at := 0, 0.0
	for _, e := range rep.Events {
		if e.Kind == lab.EventChaos && strings.Contains(e.Detail, "paused with SIGSTOP") {
			node, at = e.Node, e.T
			break
		}
	}
	var inside lab.Event
	for _, e := range rep.Events {
		if e.Node == node && e.Kind == lab.EventEnter && e.T <= at {
			inside = e
		}
	}
	if inside.Attempt == "" {
		return false
	}
	end := math.Inf(1)
	for _, e := range rep.Events {
		if e.Attempt == inside.Attempt && (e.Kind == lab.EventExecuted || e.Kind == lab.EventStale || e.Kind == lab.EventAbandon) {
			end = e.T
		}
	}
	for _, e := range rep.Events {
		if e.Kind == lab.EventExecuted && e.Node != node && e.Job == inside.Job && e.Token > inside.Token && e.T > at && e.T < end {
			return true
		}
	}
	return false
}
