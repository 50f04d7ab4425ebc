package runner_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/schedule"
)

// The runbook's answers that go through the owners of the tables
// (schedule's run table, pglease's lease table) are what the runbook's own
// SQL answered before: the same rows, columns and text.
func TestInspectThroughOwners(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })

	answers, err := runner.Inspect(ctx, db, []string{"stuck", "expired"}, runner.InspectOptions{})
	require.NoError(t, err)
	require.Equal(t, "no table aegis_schedule_run here", answers[0].Skipped)
	require.Equal(t, "no table aegis_lease here", answers[1].Skipped)

	_, err = schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	require.NoError(t, pglease.Migrate(ctx, pool, nil))
	_, err = db.ExecContext(ctx, `
INSERT INTO aegis_schedule_run (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at) VALUES
	('default', 'export', now() - interval '1 hour', 11, 'n1', 1, 'running', now() - interval '1 hour', now() - interval '50 minutes'),
	('billing', 'export', now() - interval '2 hours', 22, 'n2', 2, 'running', now() - interval '2 hours', now() - interval '1 hour'),
	('default', 'fresh', now() - interval '1 minute', 33, 'n1', 1, 'running', now() - interval '1 minute', now() - interval '30 seconds'),
	('default', 'done', now() - interval '3 hours', 44, 'n1', 1, 'succeeded', now() - interval '3 hours', now() - interval '3 hours');
INSERT INTO aegis_lease (key, owner, holder, token, expires_at, granted_at) VALUES
	('ran-out', 'secret', 'web-1', 5, now() - interval '1 minute', now() - interval '2 minutes'),
	('released', 'secret', 'web-1', 6, '-infinity', now() - interval '2 minutes'),
	('live', 'secret', 'web-1', 7, now() + interval '1 minute', now());`)
	require.NoError(t, err)

	o := runner.InspectOptions{OlderThan: 10 * time.Minute, Limit: 20}
	answers, err = runner.Inspect(ctx, db, []string{"stuck", "expired"}, o)
	require.NoError(t, err)
	require.Len(t, answers, 2)
	stuck, expired := answers[0], answers[1]
	require.Len(t, stuck.Rows, 2, "the fresh run is younger than the threshold, the done one ended")
	require.Equal(t, "default", stuck.Rows[0][0], "the latest started first")
	require.Len(t, expired.Rows, 1, "a released key did not run out")
	require.Equal(t, "ran-out", expired.Rows[0][0])

	// What the runbook's SQL answered before it read through the owners.
	columns, rows := query(t, db, `SELECT namespace, job, fire_at, node, token, attempt, started_at, expires_at
FROM aegis_schedule_run
WHERE state = 'running' AND expires_at < now()
  AND started_at < now() - $1 * interval '1 millisecond'
ORDER BY started_at DESC
LIMIT $2`, o.OlderThan.Milliseconds(), o.Limit)
	require.Equal(t, columns, stuck.Columns)
	require.Equal(t, rows, stuck.Rows)
	columns, rows = query(t, db, `SELECT key, token, granted_at, expires_at
FROM aegis_lease WHERE expires_at <= now() AND expires_at > '-infinity'
ORDER BY expires_at DESC LIMIT $1`, o.Limit)
	require.Equal(t, columns, expired.Columns)
	require.Equal(t, rows, expired.Rows)
}

// query answers SQL as text, the way the runbook reads its own tables.
func query(t *testing.T, db *sql.DB, q string, args ...any) ([]string, [][]string) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q, args...)
	require.NoError(t, err)
	defer rows.Close()
	columns, err := rows.Columns()
	require.NoError(t, err)
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = v.String
		}
		out = append(out, row)
	}
	require.NoError(t, rows.Err())
	return columns, out
}
