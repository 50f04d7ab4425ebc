package cli

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/queue"
)

// Inspect's jobs and refused read the queue's and the fence's tables that
// --queue-table and --fence-table name: billing's stuck job and refused
// write, and none of them from the default tables, which this database
// does not have.
func TestInspectConfiguredTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.PostgresURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	q, err := queue.New(pool, &queue.Config{Table: "billing_job"})
	require.NoError(t, err)
	require.NoError(t, q.Migrate(ctx))
	// A job whose worker died a minute ago, past its lease.
	_, err = pool.Exec(ctx, `INSERT INTO billing_job (queue, kind, args, state, attempt, max_attempts, token, locked_until, locked_by, attempted_at)
		VALUES ('invoices', 'email', '{}', 'running', 1, 3, 4, now() - interval '1 minute', 'worker-7', now() - interval '2 minutes')`)
	require.NoError(t, err)
	f, err := fence.New(&fence.Config{Table: "billing_fence"})
	require.NoError(t, err)
	require.NoError(t, f.Migrate(ctx, pool))
	check := func(token aegis.Token) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, "ledger/2026-11", token) })
	}
	require.NoError(t, check(6))
	require.ErrorIs(t, check(5), aegis.ErrStale)

	code, stdout, stderr := run(t, "inspect", "--postgres-url", url, "--queue-table", "billing_job", "--fence-table", "billing_fence", "jobs", "refused")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?s)^jobs — the queue's jobs running past their lease.*\n  queue\s+id\s+kind\s+attempt\s+token\s+locked_by\s+locked_until\s+last_error\n  invoices\s+1\s+email\s+1\s+4\s+worker-7\s+`, stdout)
	require.Regexp(t, `(?s)\nrefused — writes the fence refused.*\n  resource\s+token\s+held\s+lease_key\s+node\s+schedule\s+at\n  ledger/2026-11\s+5\s+6\s+`, stdout)

	code, stdout, stderr = run(t, "inspect", "--postgres-url", url, "jobs", "refused")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "(skipped: no table aegis_job here)")
	require.Contains(t, stdout, "(skipped: no table aegis_fence_refusal_log here)")

	for _, cmd := range []string{"inspect", "console"} {
		code, _, stderr = run(t, cmd, "--postgres-url", url, "--queue-table", "bad-name")
		if cmd == "console" {
			code, _, stderr = run(t, cmd, "--store", url, "--queue-table", "bad-name")
		}
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, `--queue-table: `+aegis.ErrInvalid.Error()+`: "bad-name" is not a valid table name`)
		code, _, stderr = run(t, cmd, "--store", url, "--fence-table", "a.b.c")
		if cmd == "inspect" {
			code, _, stderr = run(t, cmd, "--postgres-url", url, "--fence-table", "a.b.c")
		}
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, `--fence-table: `)
		require.NotContains(t, stderr, url, "the URL is never printed")
	}
}
