package runner_test

import (
	"context"
	"database/sql"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/servers"
)

// switchoverRE reads when the switchover began from the promotion's event.
var switchoverRE = regexp.MustCompile(`promoted standby at [0-9.]+s, the switchover begun at (-?[0-9.]+)s`)

// promote:standby in real runs, one after the other on one session (each
// promotion stops the session's primary; the second run's standby is a new
// base backup of the first's promoted one): the invoice-export-regions
// preset (run-key mode) and a leader-mode run. In each, the second
// region's node never entered a critical section before the promotion,
// every commit a node reported is on the new primary, the report's
// verdict (duplicates, lost updates, re-fires, missed ticks) is what SQL
// over the new primary says, and no tick ran again after it had
// succeeded, except, as the label allows, a reaper's retry.
func TestPromoteStandby(t *testing.T) {
	t.Parallel()
	s := ownServers(t, servers.KindPostgres)
	sc, ok := lab.LookupScenario("invoice-export-regions")
	require.True(t, ok)
	require.Len(t, sc.Runs, 1)
	queue := short("queue", true, "promote:standby@2800ms")
	queue.Standby, queue.Duration, queue.TTL = 1, 14*queue.Tick, time.Second
	queue.Catalog = catalog(t, "export=400ms/100ms,report=800ms/100ms")
	require.NoError(t, queue.Validate())

	for _, c := range []lab.Config{sc.Runs[0], queue} {
		t.Run(c.Strategy, func(t *testing.T) {
			rep, r, old := runPromoted(t, s, c)
			st := requirePromoted(t, s, r, rep, old)
			require.NotContains(t, rep.Harms, lab.HarmRefire, "no tick ran again after it had succeeded")
			require.Equal(t, rep.RetriedRefires, rep.Refires, "a re-fire is at most a reaper's retry of a run whose end the promotion lost")
			// Not zero re-fires: the preset's promotion usually falls
			// between a tick's commit and the next, but a node running
			// late can have a run's end record cut by the switchover,
			// and its retry is the re-fire the label allows.
			requireLabelKept(t, rep, st)
		})
	}
}

// runPromoted runs c, which promotes the session's standby, to its end,
// and returns its report, the run, and the store's URL before the
// promotion.
func runPromoted(t *testing.T, s *runner.Session, c lab.Config) (*lab.Report, *runner.Run, string) {
	t.Helper()
	c.OutDir = t.TempDir()
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	old := s.StoreURL()
	ctx, cancel := context.WithTimeout(t.Context(), c.Duration+c.Window()+2*time.Minute)
	defer cancel()
	rep, err := r.Wait(ctx)
	require.NoError(t, err, "the run did not end")
	logRun(t, s, r, rep)
	return rep, r, old
}

// requirePromoted checks a run through a promotion against the new
// primary, the store of record (see TestPromoteStandby), and returns what
// that store holds.
func requirePromoted(t *testing.T, s *runner.Session, r *runner.Run, rep *lab.Report, old string) store {
	t.Helper()
	e := chaosEvent(t, rep.Events, lab.EventChaos, "promoted standby at")
	m := switchoverRE.FindStringSubmatch(e.Detail)
	require.NotNil(t, m, e.Detail)
	began, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	now := s.StoreURL()
	require.NotEqual(t, old, now, "the store of record moved to the standby")

	// The old primary is gone: nothing connects to it.
	cctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(cctx, old); err == nil {
		_ = conn.Close(cctx)
		t.Fatalf("the old primary %s still accepts connections", old)
	}

	// The report is SQL over the new primary.
	st := requireConsistentAt(t, now, r, rep)
	db, err := sql.Open("pgx", now)
	require.NoError(t, err)
	defer db.Close()
	var rows int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM aegis_lab_audit WHERE run = $1 AND status = 'EXECUTED'`, r.ID).Scan(&rows))
	require.GreaterOrEqual(t, rows, executedAfter(rep.Events, -1e9), "every commit a node reported is on the new primary")
	require.Positive(t, executedAfter(rep.Events, e.T), "the nodes committed ticks on the new primary")

	// The second region (node3) ran nothing before the promotion: no
	// event of a section of its, no row of its in the store of record.
	standby := r.Config().Nodes
	for _, ev := range rep.Events {
		if ev.Node == standby && ev.T < began {
			require.NotContains(t, []string{lab.EventAcquired, lab.EventEnter, lab.EventEntered, lab.EventWriting, lab.EventExecuted}, ev.Kind,
				"node%d, on the standby, %s at %.3fs, before the promotion began at %.3fs", standby, ev.Kind, ev.T, began)
		}
	}
	beganMS := r.StartTime().Add(time.Duration(began * float64(time.Second))).UnixMilli()
	for job, j := range st {
		for _, a := range j.rows {
			require.False(t, a.node == standby && a.enteredMS < beganMS,
				"%s tick %d: node%d, on the standby, committed a section it entered before the promotion", job, a.tick, standby)
		}
	}
	var after int
	for _, ev := range rep.Events {
		if ev.Node == standby && ev.Kind == lab.EventExecuted {
			after++
		}
	}
	t.Logf("node%d (second region) committed %d ticks after the promotion", standby, after)
	require.True(t, slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, m[0]) }),
		"the report's notes show the promotion: %q", rep.Notes)
	require.True(t, slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.Contains(n, "entered 0 critical sections and committed 0 ticks (the store of record's rows) before the promotion")
	}), "the report's note says the second region ran nothing before the promotion: %q", rep.Notes)
	return st
}
