package schedule_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/schedule"
)

// The triage reads count in the store and filter what real schedulers
// left (historytest: nightly's tick ran twice, its holder refused; orphan
// missed) and historytest.Rows (ledger applied twice and failed, report
// lost 2h ago), on both dialects; bad filters are refused.
func TestRunReaderTriage(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			open := historytest.OpenPostgres(t)
			if dialect == "sqlite" {
				open = historytest.OpenSQLite(t, filepath.Join(t.TempDir(), "triage.db"))
			}
			h := historytest.Make(t, open)
			db := open()
			now := historytest.Now(t, db)
			historytest.WriteAttempts(t, db, now, historytest.Rows)
			r, err := schedule.NewRunReader(ctx, db, nil)
			require.NoError(t, err)

			hour, err := r.Counts(ctx, now.Add(-time.Hour))
			require.NoError(t, err)
			require.Equal(t, schedule.AttemptCounts{Lost: 0, Refused: 1, RanTwice: 1, AppliedTwice: 1}, hour,
				"nightly's holder refused (its tick ran twice), ledger's tick applied twice; report's lost attempt is 2h old")
			day, err := r.Counts(ctx, now.Add(-24*time.Hour))
			require.NoError(t, err)
			require.Equal(t, schedule.AttemptCounts{Lost: 1, Refused: 1, RanTwice: 2, AppliedTwice: 1}, day)
			future, err := r.Counts(ctx, now.Add(time.Hour))
			require.NoError(t, err)
			require.Zero(t, future)

			find := func(f schedule.AttemptFilter) ([]schedule.Attempt, int) {
				t.Helper()
				as, n, err := r.FindAttempts(ctx, f)
				require.NoError(t, err)
				return as, n
			}
			jobs := func(as []schedule.Attempt) []string {
				var out []string
				for _, a := range as {
					out = append(out, a.Job+"/"+a.Outcome)
				}
				return out
			}
			as, n := find(schedule.AttemptFilter{Outcome: "refused", Since: now.Add(-time.Hour), Limit: 10})
			require.Equal(t, 1, n)
			require.Len(t, as, 1)
			require.Equal(t, h.Holder.Token, as[0].Token)
			require.Equal(t, h.Holder.Error, as[0].Error)

			as, n = find(schedule.AttemptFilter{Outcome: schedule.RanTwice, Since: now.Add(-time.Hour), Limit: 10})
			require.Equal(t, 2, n, "every attempt of nightly's tick")
			require.Equal(t, []string{"nightly/succeeded", "nightly/refused"}, jobs(as), "the newest attempt first")
			require.Equal(t, h.Successor.Token, as[0].Token)

			as, n = find(schedule.AttemptFilter{Outcome: schedule.RanTwice, Since: now.Add(-24 * time.Hour), Limit: 10})
			require.Equal(t, 4, n)
			require.Equal(t, []string{"report/succeeded", "report/lost", "nightly/succeeded", "nightly/refused"}, jobs(as), "newest tick first (nightly's fire time is 2026-01-01, on its manual clock)")
			as, n = find(schedule.AttemptFilter{Outcome: schedule.RanTwice, Since: now.Add(-24 * time.Hour), Limit: 1})
			require.Equal(t, 4, n, "the total, past the limit")
			require.Len(t, as, 1)
			as, n = find(schedule.AttemptFilter{Outcome: schedule.RanTwice, Job: "report", Limit: 10})
			require.Equal(t, 2, n, "the whole history of report")
			require.Equal(t, []string{"report/succeeded", "report/lost"}, jobs(as))

			as, n = find(schedule.AttemptFilter{Outcome: schedule.AppliedTwice, Since: now.Add(-time.Hour), Limit: 10})
			require.Equal(t, 2, n)
			require.Equal(t, []string{"ledger/succeeded", "ledger/succeeded"}, jobs(as))
			_, n = find(schedule.AttemptFilter{Outcome: schedule.AppliedTwice, Job: "nightly", Limit: 10})
			require.Zero(t, n, "the fence held: nightly's tick was applied once")

			as, n = find(schedule.AttemptFilter{Outcome: "lost", Since: now.Add(-24 * time.Hour), Limit: 10})
			require.Equal(t, 1, n)
			require.Equal(t, "report", as[0].Job)
			_, n = find(schedule.AttemptFilter{Outcome: "lost", Since: now.Add(-time.Hour), Limit: 10})
			require.Zero(t, n)
			as, n = find(schedule.AttemptFilter{Job: "ledger", Limit: 10})
			require.Equal(t, 3, n)
			require.Equal(t, []string{"ledger/succeeded", "ledger/succeeded", "ledger/failed"}, jobs(as))
			_, n = find(schedule.AttemptFilter{Since: now.Add(-time.Hour), Limit: 100})
			require.Equal(t, 5, n, "nightly's two attempts and ledger's three")

			nightly, err := r.Health(ctx, "nightly", now.Add(-time.Hour))
			require.NoError(t, err)
			require.Equal(t, h.Successor.Ended, nightly.LastSuccess, "the successor's attempt, not the refused one")
			require.True(t, nightly.LastFailure.IsZero())
			require.Empty(t, nightly.LastError)
			require.Zero(t, nightly.Missed)
			ledger, err := r.Health(ctx, "ledger", now.Add(-time.Hour))
			require.NoError(t, err)
			require.WithinDuration(t, now.Add(-9*time.Minute), ledger.LastSuccess, time.Second)
			require.WithinDuration(t, now.Add(-20*time.Minute), ledger.LastFailure, time.Second)
			require.Equal(t, "disk full", ledger.LastError)
			orphan, err := r.Health(ctx, "orphan", now.Add(-time.Hour))
			require.NoError(t, err)
			require.Equal(t, len(h.Missed), orphan.Missed)
			require.True(t, orphan.LastSuccess.IsZero())
			orphan, err = r.Health(ctx, "orphan", now.Add(time.Hour))
			require.NoError(t, err)
			require.Zero(t, orphan.Missed)
		})
	}
}

// On SQLite the reads hint the planner to the attempt table's partial
// index, and go without the hint on a database whose replicas predate the
// index (the reader migrates nothing).
func TestRunReaderTriageWithoutTheIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := historytest.OpenSQLite(t, filepath.Join(t.TempDir(), "old.db"))()
	_, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	now := historytest.Now(t, db)
	historytest.WriteAttempts(t, db, now, historytest.Rows)
	r, err := schedule.NewRunReader(ctx, db, nil)
	require.NoError(t, err)
	check := func() {
		t.Helper()
		c, err := r.Counts(ctx, now.Add(-24*time.Hour))
		require.NoError(t, err)
		require.Equal(t, schedule.AttemptCounts{Lost: 1, RanTwice: 1, AppliedTwice: 1}, c)
		as, n, err := r.FindAttempts(ctx, schedule.AttemptFilter{Outcome: schedule.AppliedTwice, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Len(t, as, 2)
	}
	check()
	_, err = db.ExecContext(ctx, `DROP INDEX aegis_schedule_run_attempt_twice`)
	require.NoError(t, err)
	check()
}

func TestRunReaderTriageRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := historytest.OpenSQLite(t, filepath.Join(t.TempDir(), "bad.db"))()
	_, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	r, err := schedule.NewRunReader(ctx, db, nil)
	require.NoError(t, err)
	for _, tt := range []struct {
		f    schedule.AttemptFilter
		want string
	}{
		{schedule.AttemptFilter{Limit: 0}, "AttemptFilter.Limit 0 is not positive"},
		{schedule.AttemptFilter{Limit: -1, Outcome: "lost"}, "AttemptFilter.Limit -1"},
		{schedule.AttemptFilter{Limit: 10, Outcome: "ran twice"}, `AttemptFilter.Outcome "ran twice" is not an outcome: want one of running, succeeded`},
		{schedule.AttemptFilter{Limit: 10, Outcome: "Lost"}, `AttemptFilter.Outcome "Lost"`},
		{schedule.AttemptFilter{Limit: 10, Job: "a\x00b"}, "AttemptFilter.Job: aegis: invalid argument: key contains a NUL byte at offset 1"},
		{schedule.AttemptFilter{Limit: 10, Job: "\xff"}, "AttemptFilter.Job: aegis: invalid argument: key is not valid UTF-8"},
	} {
		_, _, err := r.FindAttempts(ctx, tt.f)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.want)
		require.ErrorContains(t, err, tt.want)
	}
	_, err = r.Health(ctx, "", time.Time{})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "health: job: aegis: invalid argument: key is empty")
	require.Contains(t, schedule.Outcomes(), schedule.RanTwice)
	require.Contains(t, schedule.Outcomes(), schedule.AppliedTwice)
}

// FindAttempts counts at most CountBound attempts, and reads its limit.
func TestFindAttemptsCountsToTheBound(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			open := historytest.OpenPostgres(t)
			fill := `INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_at, token, attempt, node, outcome, claimed_at)
SELECT 'default', 'busy', to_timestamp(i), i, 1, 'n1', 'succeeded', now() FROM generate_series(1, $1) AS i`
			if dialect == "sqlite" {
				open = historytest.OpenSQLite(t, filepath.Join(t.TempDir(), "bound.db"))
				fill = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms)
SELECT 'default', 'busy', i * 1000, i, 1, 'n1', 'succeeded', ` + "CAST(unixepoch('subsec') * 1000 AS INTEGER)" + ` FROM n`
			}
			db := open()
			_, err := schedule.NewStore(ctx, db, nil)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, fill, schedule.CountBound+5)
			require.NoError(t, err)
			r, err := schedule.NewRunReader(ctx, db, nil)
			require.NoError(t, err)
			as, n, err := r.FindAttempts(ctx, schedule.AttemptFilter{Job: "busy", Limit: 3})
			require.NoError(t, err)
			require.Equal(t, schedule.CountBound, n, "counted up to the bound")
			require.Len(t, as, 3)
			require.Equal(t, []aegis.Token{schedule.CountBound + 5, schedule.CountBound + 4, schedule.CountBound + 3}, []aegis.Token{as[0].Token, as[1].Token, as[2].Token}, "the newest tick first")
			c, err := r.Counts(ctx, time.Now().Add(-time.Hour))
			require.NoError(t, err)
			require.Zero(t, c, "nothing lost, refused, ran twice or applied twice")
		})
	}
}
