package schedule_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// runRow is a row the reader test writes into the run table: times are
// offsets from now, in the store's clock.
type runRow struct {
	ns, job, state string
	fire, started  time.Duration // before now
	expires        time.Duration // from now; negative: past
	ended          bool
	token          int64
	attempt        int
}

var readerRows = []runRow{
	{ns: "default", job: "a", state: "succeeded", fire: 3 * time.Hour, started: 3 * time.Hour, expires: -3 * time.Hour, ended: true, token: 11, attempt: 1},
	{ns: "default", job: "a", state: "running", fire: 2 * time.Hour, started: time.Hour, expires: -50 * time.Minute, token: 22, attempt: 2},
	{ns: "default", job: "b", state: "running", fire: time.Hour, started: time.Hour, expires: time.Hour, token: 33, attempt: 1},
	{ns: "other", job: "a", state: "running", fire: 4 * time.Hour, started: 4 * time.Hour, expires: -time.Hour, token: 44, attempt: 1},
}

// The reader reads what the rows hold, in both dialects, under a table name
// of the caller's, and creates nothing.
func TestRunReader(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var db *sql.DB
			if dialect == "postgres" {
				db = testenv.PostgresSQL(t)
			} else {
				var err error
				db, err = sqlitelease.Open(sqlitePath(t))
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
			}
			cfg := &schedule.StoreConfig{Table: "ops_runs"}
			r, err := schedule.NewRunReader(ctx, db, cfg)
			require.NoError(t, err)
			require.Equal(t, "ops_runs", r.Table())
			ok, err := r.Exists(ctx)
			require.NoError(t, err)
			require.False(t, ok, "the reader creates no table")
			_, err = schedule.NewStore(ctx, db, cfg)
			require.NoError(t, err)
			ok, err = r.Exists(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			writeRuns(t, db, dialect, readerRows)

			all, err := r.Latest(ctx, "", 10)
			require.NoError(t, err)
			require.Len(t, all, 3, "the default namespace's runs only")
			require.Equal(t, []string{"b", "a", "a"}, []string{all[0].Job, all[1].Job, all[2].Job}, "newest fire first")
			require.Equal(t, aegis.Token(33), all[0].Token)
			require.True(t, all[0].Ended.IsZero(), "a running run has no end")
			require.True(t, all[0].Expires.After(time.Now()))
			require.Equal(t, "succeeded", all[2].State)
			require.False(t, all[2].Ended.IsZero())
			require.WithinDuration(t, time.Now().Add(-3*time.Hour), all[2].Fire, time.Minute)
			require.Equal(t, "default", all[2].Namespace)

			a, err := r.Latest(ctx, "a", 1)
			require.NoError(t, err)
			require.Len(t, a, 1)
			require.Equal(t, aegis.Token(22), a[0].Token)
			require.Equal(t, 2, a[0].Attempt)
			_, err = r.Latest(ctx, "a", 0)
			require.ErrorIs(t, err, aegis.ErrInvalid)

			stuck, err := r.Stuck(ctx, 10*time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 2, "every namespace's runs past their expiry")
			require.Equal(t, []string{"default", "other"}, []string{stuck[0].Namespace, stuck[1].Namespace}, "the latest started first")
			require.Equal(t, aegis.Token(22), stuck[0].Token)
			require.Equal(t, "running", stuck[0].State)
			stuck, err = r.Stuck(ctx, 2*time.Hour, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 1, "only the run started 4h ago is older than 2h")
			_, err = r.Stuck(ctx, -time.Second, 10)
			require.ErrorIs(t, err, aegis.ErrInvalid)

			other, err := schedule.NewRunReader(ctx, db, &schedule.StoreConfig{Table: "ops_runs", Namespace: "other"})
			require.NoError(t, err)
			runs, err := other.Latest(ctx, "", 10)
			require.NoError(t, err)
			require.Len(t, runs, 1)
			require.Equal(t, aegis.Token(44), runs[0].Token)
		})
	}
}

func TestRunReaderRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := schedule.NewRunReader(t.Context(), nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	db := testenv.PostgresSQL(t)
	_, err = schedule.NewRunReader(t.Context(), db, &schedule.StoreConfig{Table: "a.b.c"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "StoreConfig.Table")
}

// writeRuns inserts rows into ops_runs, with times relative to the store's
// clock.
func writeRuns(t *testing.T, db *sql.DB, dialect string, rows []runRow) {
	t.Helper()
	for _, r := range rows {
		var err error
		if dialect == "postgres" {
			_, err = db.ExecContext(t.Context(), `INSERT INTO ops_runs (namespace, job, fire_at, token, node, attempt, state, started_at, ended_at, expires_at, error)
VALUES ($1, $2, now() - $3 * interval '1 millisecond', $4, 'n1', $5, $6, now() - $7 * interval '1 millisecond',
	CASE WHEN $8 THEN now() - $7 * interval '1 millisecond' END, now() + $9 * interval '1 millisecond', NULL)`,
				r.ns, r.job, r.fire.Milliseconds(), r.token, r.attempt, r.state, r.started.Milliseconds(), r.ended, r.expires.Milliseconds())
		} else {
			now := time.Now().UnixMilli()
			var ended any
			if r.ended {
				ended = now - r.started.Milliseconds()
			}
			_, err = db.ExecContext(t.Context(), `INSERT INTO ops_runs (namespace, job, fire_ms, token, node, attempt, state, started_ms, ended_ms, expires_ms, error)
VALUES (?, ?, ?, ?, 'n1', ?, ?, ?, ?, ?, NULL)`,
				r.ns, r.job, now-r.fire.Milliseconds(), r.token, r.attempt, r.state, now-r.started.Milliseconds(), ended, now+r.expires.Milliseconds())
		}
		require.NoError(t, err)
	}
}
