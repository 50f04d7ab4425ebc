package queue

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

// inspectorRows are jobs written straight into the tables, each with its
// times relative to its own statement's now(), so every figure the
// Inspector computes is exact.
const inspectorRows = `
INSERT INTO aegis_job (id, queue, kind, args, state, attempt, max_attempts, token, run_at, attempted_at, locked_until, locked_by, errors) VALUES
	(1, 'mail', 'email', '{"to":"a@example.com"}', 'available', 0, 3, 0, now(), NULL, NULL, NULL, '[]');
INSERT INTO aegis_job (id, queue, kind, args, state, attempt, max_attempts, token, run_at, attempted_at, locked_until, locked_by, errors) VALUES
	(2, 'mail', 'email', '{}', 'scheduled', 1, 3, 2, now() + interval '1 hour', now() - interval '1 minute', NULL, NULL,
	 '[{"attempt": 1, "token": 1, "at": "2026-01-01T00:00:00Z", "error": "smtp: 550"}]');
INSERT INTO aegis_job (id, queue, kind, args, state, attempt, max_attempts, token, run_at, attempted_at, locked_until, locked_by, errors) VALUES
	(3, 'mail', 'email', '{}', 'running', 1, 3, 1, now() - interval '30 seconds', now() - interval '10 seconds', now() - interval '1 minute', 'w1', '[]');
INSERT INTO aegis_job (id, queue, kind, args, state, attempt, max_attempts, token, run_at, attempted_at, locked_until, locked_by, errors) VALUES
	(4, 'mail', 'email', '{}', 'running', 1, 3, 1, now() - interval '6 seconds', now() - interval '5 seconds', now() + interval '1 minute', 'w1', '[]');
INSERT INTO aegis_job_finished (id, queue, kind, args, priority, run_at, state, attempt, max_attempts, token, locked_by, errors, created_at, attempted_at, finalized_at) VALUES
	(5, 'mail', 'email', '{}', 0, now() - interval '41 seconds', 'completed', 1, 3, 2, 'w1', '[]', now(), now() - interval '40 seconds', now() - interval '30 seconds');
INSERT INTO aegis_job_finished (id, queue, kind, args, priority, run_at, state, attempt, max_attempts, token, locked_by, errors, created_at, attempted_at, finalized_at) VALUES
	(6, 'mail', 'email', '{}', 0, now() - interval '100 seconds', 'completed', 1, 3, 2, 'w1', '[]', now(), now() - interval '100 seconds', now() - interval '90 seconds');
INSERT INTO aegis_job_finished (id, queue, kind, args, priority, run_at, state, attempt, max_attempts, token, locked_by, errors, created_at, attempted_at, finalized_at) VALUES
	(7, 'mail', 'flaky', '{"to":"b@example.com"}', 0, now() - interval '11 minutes 4 seconds', 'discarded', 3, 3, 6, 'w1',
	 '[{"attempt": 1, "token": 1, "at": "2026-01-01T00:00:00Z", "error": "one"}, {"attempt": 2, "token": 3, "at": "2026-01-01T00:00:01Z", "error": "two"}, {"attempt": 3, "token": 5, "at": "2026-01-01T00:00:02Z", "error": "three"}]',
	 now(), now() - interval '11 minutes', now() - interval '10 minutes');
INSERT INTO aegis_job_finished (id, queue, kind, args, priority, run_at, state, attempt, max_attempts, token, locked_by, errors, created_at, attempted_at, finalized_at) VALUES
	(8, 'other', 'email', '{}', 0, now() - interval '3 hours', 'cancelled', 1, 3, 2, NULL, '[]', now(), now() - interval '3 hours', now() - interval '2 hours');
INSERT INTO aegis_queue (name, paused) VALUES ('quiet', true);
`

// The Inspector counts, measures and lists what the tables hold.
func TestInspector(t *testing.T) {
	t.Parallel()
	ctx, p := t.Context(), pool(t)
	db := stdlib.OpenDBFromPool(p)
	t.Cleanup(func() { db.Close() })
	in, err := NewInspector(db)
	require.NoError(t, err)
	missing, err := in.Missing(ctx)
	require.NoError(t, err)
	require.Equal(t, "", missing)
	keeps, err := in.KeepsCompleted(ctx)
	require.NoError(t, err)
	require.False(t, keeps)
	_, err = p.Exec(ctx, inspectorRows)
	require.NoError(t, err)

	sum, err := in.Summary(ctx)
	require.NoError(t, err)
	require.Len(t, sum, 3)
	require.Equal(t, []string{"mail", "other", "quiet"}, []string{sum[0].Queue, sum[1].Queue, sum[2].Queue})
	mail := sum[0]
	require.Equal(t, map[State]int64{StateAvailable: 1, StateScheduled: 1, StateRunning: 2, StateCompleted: 2, StateDiscarded: 1}, mail.Counts)
	require.EqualValues(t, 1, mail.Retrying)
	require.EqualValues(t, 1, mail.Stuck)
	require.EqualValues(t, 2, mail.Completed, "the last hour's")
	require.EqualValues(t, 1, mail.Dead, "the last hour's")
	var minutes [60]int64
	minutes[59], minutes[58] = 1, 1
	require.Equal(t, minutes, mail.Minutes, "one completion in the current minute, one in the one before")
	// Waits: running 20s and 1s; finished 1s, 0s and 4s.
	require.EqualValues(t, 5, mail.Waits)
	require.Equal(t, time.Second, mail.WaitP50)
	require.InDelta(t, 16.8, mail.WaitP95.Seconds(), 1e-6, "percentile_cont between 4s and 20s")
	require.False(t, mail.Paused)
	require.Equal(t, map[State]int64{StateCancelled: 1}, sum[1].Counts)
	require.Zero(t, sum[1].Dead, "finished two hours ago")
	require.Zero(t, sum[1].Waits)
	require.True(t, sum[2].Paused, "a paused queue without jobs has a line")
	require.Empty(t, sum[2].Counts)
	keeps, err = in.KeepsCompleted(ctx)
	require.NoError(t, err)
	require.True(t, keeps)

	stuck, err := in.Stuck(ctx, 10)
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	require.Equal(t, JobSummary{ID: 3, Queue: "mail", Kind: "email", State: StateRunning, Attempt: 1, MaxAttempts: 3, Token: 1, LockedBy: "w1",
		RunAt: stuck[0].RunAt, Attempted: stuck[0].Attempted, LockedUntil: stuck[0].LockedUntil}, stuck[0])
	require.Equal(t, 20*time.Second, stuck[0].Attempted.Sub(stuck[0].RunAt))
	dead, err := in.Dead(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{7, 8}, []int64{dead[0].ID, dead[1].ID}, "the latest finished first")
	require.Equal(t, "three", dead[0].LastError)
	require.Equal(t, 3, dead[0].Errors)
	require.False(t, dead[0].Finished.IsZero())
	require.True(t, dead[0].LockedUntil.IsZero())
	dead, err = in.Dead(ctx, 1)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	_, err = in.Dead(ctx, 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)

	running, err := in.Jobs(ctx, "mail", StateRunning, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{4, 3}, []int64{running[0].ID, running[1].ID}, "the newest first")
	done, err := in.Jobs(ctx, "mail", StateCompleted, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{6, 5}, []int64{done[0].ID, done[1].ID})
	none, err := in.Jobs(ctx, "nosuch", StateAvailable, 10)
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = in.Jobs(ctx, "mail", "dead", 10)
	require.ErrorIs(t, err, aegis.ErrInvalid)

	j, err := in.Job(ctx, 7, 5, 2)
	require.NoError(t, err)
	require.Equal(t, `{"to"`, j.Args, "the args cut")
	require.Equal(t, len(`{"to": "b@example.com"}`), j.ArgsLen, "the whole text's length (jsonb's)")
	require.Equal(t, 3, j.Errors)
	require.Len(t, j.Entries, 2, "the latest two")
	require.Equal(t, "two", j.Entries[0].Error)
	require.Equal(t, aegis.Token(5), j.Entries[1].Token)
	require.Equal(t, StateDiscarded, j.State)
	require.False(t, j.Stuck)
	j, err = in.Job(ctx, 3, 100, 100)
	require.NoError(t, err)
	require.True(t, j.Stuck, "running past its lease")
	j, err = in.Job(ctx, 4, 100, 100)
	require.NoError(t, err)
	require.False(t, j.Stuck)
	require.Equal(t, "{}", j.Args)
	_, err = in.Job(ctx, 999, 100, 100)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = in.Job(ctx, 4, 0, 100)
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// Missing names the first table the schema lacks.
func TestInspectorMissing(t *testing.T) {
	t.Parallel()
	db := stdlib.OpenDBFromPool(poolWithoutTables(t))
	t.Cleanup(func() { db.Close() })
	in, err := NewInspector(db)
	require.NoError(t, err)
	missing, err := in.Missing(t.Context())
	require.NoError(t, err)
	require.Equal(t, "aegis_job", missing)
	_, err = NewInspector(nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
}
