package lab_test

import (
	"database/sql"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testenv"
	"github.com/aegislab/aegis/lab"
)

// What a faulted run shows depends on a race: whether another node entered
// the faulted holder's tick before the holder wrote (its lease had to
// expire first, and the lab had to catch the holder before its write). So
// these tests assert what holds whichever way the race went: the report
// agrees with the audit rows in SQL, harm in the store is reported as harm,
// a fenced run does no harm; and what the interleaving the events show
// forces (see takeover).

// storeAudit is what the store of record says about a run, read with SQL,
// apart from the lab's report.
type storeAudit struct {
	executed  map[int]int     // tick → its EXECUTED rows
	wrote     map[int64]int   // balance written → the EXECUTED rows that wrote it
	committed map[string]bool // attempt → it has an EXECUTED row
	refused   int             // REFUSED rows
	effects   int64           // EXECUTED rows
	balance   int64
}

func readAudit(t *testing.T, run string) storeAudit {
	t.Helper()
	db, err := sql.Open("pgx", testenv.PostgresURL(t))
	require.NoError(t, err)
	defer db.Close()
	a := storeAudit{executed: map[int]int{}, wrote: map[int64]int{}, committed: map[string]bool{}}
	rows, err := db.QueryContext(t.Context(), `SELECT attempt, tick, status, value FROM aegis_lab_audit WHERE run = $1`, run)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var attempt, status string
		var tick int
		var value sql.NullInt64
		require.NoError(t, rows.Scan(&attempt, &tick, &status, &value))
		switch status {
		case "EXECUTED":
			require.True(t, value.Valid, "attempt %s: an EXECUTED row has its balance", attempt)
			a.executed[tick]++
			a.wrote[value.Int64]++
			a.committed[attempt] = true
			a.effects++
		case "REFUSED":
			a.refused++
		default:
			t.Fatalf("attempt %s: status %q", attempt, status)
		}
	}
	require.NoError(t, rows.Err())
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT value FROM aegis_lab_balance WHERE run = $1`, run).Scan(&a.balance))
	return a
}

// requireConsistent checks the report against the store: its counts are
// the audit rows', every tick applied twice is reported as such, and two
// commits that read the same balance (they wrote the same one) are a
// violation for the checker, whichever order they came in.
func requireConsistent(t *testing.T, run string, rep *lab.Report) {
	t.Helper()
	a := readAudit(t, run)
	var dup, missed int
	for tick := 1; tick <= rep.Ticks; tick++ {
		switch n := a.executed[tick]; {
		case n == 0:
			missed++
		case n > 1:
			dup++
			require.Contains(t, rep.Table[tick-1].Note, "DUPLICATE", "tick %d has %d EXECUTED rows: the table says so", tick, n)
		}
	}
	require.Equal(t, dup, rep.DuplicatesApplied, "duplicates_applied: the ticks with more than one EXECUTED row")
	require.Equal(t, missed, rep.MissedTicks, "missed_ticks: the ticks with no EXECUTED row")
	require.Equal(t, a.balance, rep.Balance)
	require.Equal(t, a.effects-a.balance, rep.LostUpdates, "lost_updates: EXECUTED rows minus the balance")
	require.LessOrEqual(t, a.refused, rep.StaleRejected, "every REFUSED row is a stale rejection")
	for _, at := range rep.Attempts {
		require.Equal(t, a.committed[at.ID], at.Outcome == lab.Committed, "attempt %s: committed in the report iff it has an EXECUTED row (%s)", at.ID, at.Outcome)
	}
	for v, n := range a.wrote {
		if n > 1 {
			require.Equal(t, lab.CheckViolation, rep.Checker, "%d commits wrote balance %d, each having read %d: no order explains that", n, v, v-1)
		}
	}
	if rep.Fenced {
		return
	}
	require.Zero(t, rep.StaleRejected, "unfenced, nothing refuses a write")
}

// requireSafe checks a fenced run: nothing applied twice; with a lease
// token (one fence across the ticks) no lost update either, and the
// history is linearizable.
func requireSafe(t *testing.T, rep *lab.Report) {
	t.Helper()
	require.True(t, rep.Fenced)
	require.Zero(t, rep.DuplicatesApplied, "fenced, no tick is applied twice")
	if s, _ := lab.LookupStrategy(rep.Strategy); s.Token == lab.LeaseToken {
		require.Zero(t, rep.LostUpdates)
		require.Equal(t, lab.CheckOK, rep.Checker)
	}
}

// takeover is what a pause or partition of the holder is meant to bring
// about: another node entered the holder's tick during the fault. Once
// that happened the rest is forced: the stale holder's write, when it
// comes, lands unfenced (the tick is applied twice; when both read the same
// balance, no order explains it) and is refused fenced.
type takeover struct {
	faulted   int
	stale     lab.Attempt // the faulted holder's attempt
	successor lab.Attempt // the other node's
}

// findTakeover looks for the takeover of the run's first pause or
// partition in its events.
func findTakeover(rep *lab.Report) (takeover, bool) {
	node, from, to := 0, 0.0, math.Inf(1)
	for _, e := range rep.Events {
		switch {
		case node == 0 && e.Kind == lab.EventChaos && (strings.Contains(e.Detail, "paused with SIGSTOP") || strings.Contains(e.Detail, "cut from its servers")):
			node, from = e.Node, e.T
		case node != 0 && e.Kind == lab.EventHealed && e.Node == node && e.T >= from:
			to = min(to, e.T)
		}
	}
	if node == 0 {
		return takeover{}, false
	}
	entered, ended := map[string]float64{}, map[string]float64{}
	for _, e := range rep.Events {
		switch e.Kind {
		case lab.EventEntered:
			entered[e.Attempt] = e.T
		case lab.EventExecuted, lab.EventStale, lab.EventAbandon:
			ended[e.Attempt] = e.T
		}
	}
	attempts := map[string]lab.Attempt{}
	for _, a := range rep.Attempts {
		attempts[a.ID] = a
	}
	// The holder's attempt: it had read before the fault and had not ended.
	var stale lab.Attempt
	for _, a := range rep.Attempts {
		at, ok := entered[a.ID]
		end, done := ended[a.ID]
		if a.Node == node && ok && at <= from && (!done || end >= from) {
			stale = a
		}
	}
	if stale.ID == "" {
		return takeover{}, false
	}
	for _, a := range rep.Attempts {
		at, ok := entered[a.ID]
		if ok && a.Node != node && a.Tick == stale.Tick && at >= from && at <= to {
			return takeover{faulted: node, stale: stale, successor: a}, true
		}
	}
	return takeover{}, false
}

// requireTakeoverOutcome asserts what a takeover forces, when the events
// show one: unfenced, a stale holder's write that committed applied the
// tick twice; fenced, it did not commit. wrote says the stale write must
// have come (a paused holder resumes and writes at once, its first try
// not bound by the tick's window); a partitioned holder's write may end
// with the window before the partition heals.
func requireTakeoverOutcome(t *testing.T, rep *lab.Report, wrote bool) {
	t.Helper()
	to, ok := findTakeover(rep)
	if !ok {
		t.Logf("no takeover: no node entered the faulted holder's tick during the fault, so no outcome is forced")
		return
	}
	t.Logf("takeover: node%d's attempt %s (tick %d, read %d, %s) and node%d's %s (read %d, %s)", to.faulted, to.stale.ID, to.stale.Tick, to.stale.Read,
		to.stale.Outcome, to.successor.Node, to.successor.ID, to.successor.Read, to.successor.Outcome)
	require.GreaterOrEqual(t, rep.DuplicateTicks, 1, "two nodes entered tick %d", to.stale.Tick)
	if rep.Fenced {
		require.NotEqual(t, lab.Committed, to.stale.Outcome, "the fence refuses the stale holder after its successor's token")
		if wrote {
			require.Equal(t, lab.Refused, to.stale.Outcome, "the resumed holder's write was refused")
			require.GreaterOrEqual(t, rep.StaleRejected, 1)
		}
		return
	}
	if wrote {
		require.Equal(t, lab.Committed, to.stale.Outcome, "unfenced, the resumed holder's write lands")
	}
	if to.stale.Outcome == lab.Committed && to.successor.Outcome == lab.Committed {
		require.GreaterOrEqual(t, rep.DuplicatesApplied, 1, "tick %d applied by both", to.stale.Tick)
		if to.stale.Read == to.successor.Read {
			require.Equal(t, lab.CheckViolation, rep.Checker, "both read %d and both committed", to.stale.Read)
		}
	}
}

// within bounds a wait on a run's events.
const within = 60 * time.Second

// nextEvent returns the next event that matches, failing the test when
// the run ends or within passes first.
func nextEvent(t *testing.T, events <-chan lab.Event, what string, match func(lab.Event) bool) lab.Event {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e, ok := <-events:
			require.True(t, ok, "the run ended before %s", what)
			if match(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s within %s", what, within)
		}
	}
}

// drain reads events until the run ends (the channel closes), failing the
// test when that takes longer than within.
func drain(t *testing.T, events <-chan lab.Event, each func(lab.Event)) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return
			}
			each(e)
		case <-timeout:
			t.Fatalf("the run did not end within %s", within)
		}
	}
}
