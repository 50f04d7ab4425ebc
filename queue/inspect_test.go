package queue

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	in := inspector(t, p)
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

	stuck, err := in.Stuck(ctx, "other", 10)
	require.NoError(t, err)
	require.Empty(t, stuck, "another queue's")
	stuck, err = in.Stuck(ctx, "", 10)
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
	in, err := NewInspector(db, nil)
	require.NoError(t, err)
	missing, err := in.Missing(t.Context())
	require.NoError(t, err)
	require.Equal(t, "aegis_job", missing)
	_, err = NewInspector(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// A worker process frozen mid-job (SIGSTOP): its job stays running past
// its lease, stuck, with nobody to reap it; jobs due twelve minutes ago
// wait in its queue, overdue, and so does one in a paused queue, which is
// not counted; the dead letters count by hour and day; each queue's
// oldest waiting job says that no worker holds a current lease there.
func TestInspectorHealth(t *testing.T) {
	t.Parallel()
	ctx, p := t.Context(), pool(t)
	in := inspector(t, p)
	enq := client(t, p, nil) // never started: it claims nothing and reaps nothing
	h, err := in.Health(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, &Health{}, h, "an empty queue")

	res, err := enq.Enqueue(ctx, testArgs{N: 1}, nil)
	require.NoError(t, err)
	frozen := res.Job.ID
	child := startCrashChild(t, frozen)
	require.NoError(t, child.Process.Signal(syscall.SIGSTOP), "the worker freezes mid-job")
	eventually(t, "the frozen worker's job is past its lease", func() bool {
		s, err := in.Stuck(ctx, DefaultQueue, 10)
		return err == nil && len(s) == 1 && s[0].ID == frozen
	})

	var overdue []int64
	for i := range 2 {
		r, err := enq.Enqueue(ctx, testArgs{N: 10 + i}, &EnqueueOpts{RunAt: time.Now().Add(-12*time.Minute + time.Duration(i)*time.Second)})
		require.NoError(t, err)
		require.Equal(t, StateAvailable, r.Job.State)
		overdue = append(overdue, r.Job.ID)
	}
	r, err := enq.Enqueue(ctx, testArgs{N: 20}, &EnqueueOpts{Queue: "held", RunAt: time.Now().Add(-20 * time.Minute)})
	require.NoError(t, err)
	held := r.Job
	require.NoError(t, enq.Pause(ctx, "held"))
	r, err = enq.Enqueue(ctx, testArgs{N: 30}, &EnqueueOpts{Delay: 20 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, StateScheduled, r.Job.State)
	unpromoted := r.Job.ID
	for i := range 2 {
		r, err := enq.Enqueue(ctx, testArgs{N: 40 + i}, &EnqueueOpts{Queue: "mail"})
		require.NoError(t, err)
		require.NoError(t, enq.CancelJob(ctx, r.Job.ID, "not wanted"))
		if i == 1 {
			_, err = p.Exec(ctx, `UPDATE aegis_job_finished SET finalized_at = now() - interval '3 hours' WHERE id = $1`, r.Job.ID)
			require.NoError(t, err)
		}
	}

	h, err = in.Health(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, h.Stuck)
	require.EqualValues(t, 2, h.Overdue, "the two due twelve minutes ago; not the paused queue's, not the one due now")
	require.EqualValues(t, 1, h.DeadHour)
	require.EqualValues(t, 2, h.DeadDay)
	require.Len(t, h.Oldest, 2, "mail has no waiting job")
	require.Equal(t, "held", h.Oldest[0].Queue, "the longest waiting first")
	require.Equal(t, held.ID, h.Oldest[0].ID)
	require.True(t, h.Oldest[0].Paused)
	require.True(t, h.Oldest[0].RunAt.Equal(held.RunAt), "%s, %s", h.Oldest[0].RunAt, held.RunAt)
	require.GreaterOrEqual(t, h.Oldest[0].Wait, 20*time.Minute)
	require.Less(t, h.Oldest[0].Wait, 25*time.Minute)
	require.Zero(t, h.Oldest[0].LastStart, "nothing of held ever started")
	def := h.Oldest[1]
	require.Equal(t, Waiting{Queue: DefaultQueue, ID: overdue[0], RunAt: def.RunAt, Wait: def.Wait, LastStart: def.LastStart}, def,
		"no lease current in the frozen worker's queue")
	frozenJob, err := enq.Job(ctx, frozen)
	require.NoError(t, err)
	require.True(t, def.LastStart.Equal(frozenJob.AttemptedAt), "the frozen job's start is the queue's last")
	h, err = in.Health(ctx, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, h.Oldest, 1)

	jobs, err := in.Overdue(ctx, "", time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, overdue, ids(jobs), "the longest overdue first")
	jobs, err = in.Overdue(ctx, DefaultQueue, time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, overdue[:1], ids(jobs))
	jobs, err = in.Overdue(ctx, "mail", time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, jobs)
	eventually(t, "the scheduled job nobody promotes is overdue by a grace of 0", func() bool {
		jobs, err := in.Overdue(ctx, DefaultQueue, 0, 10)
		return err == nil && slices.Contains(ids(jobs), unpromoted)
	})
	j, err := enq.Job(ctx, unpromoted)
	require.NoError(t, err)
	require.Equal(t, StateScheduled, j.State, "nobody promoted it")

	_, err = in.Health(ctx, -time.Second, 10)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = in.Health(ctx, time.Minute, 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = in.Overdue(ctx, "", -time.Second, 10)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = in.Overdue(ctx, "", time.Minute, 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = in.Stuck(ctx, "", 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// Health's counts stop past CountLimit: a huge backlog costs a bounded
// scan.
func TestInspectorHealthBounded(t *testing.T) {
	t.Parallel()
	ctx, p := t.Context(), pool(t)
	in := inspector(t, p)
	_, err := p.Exec(ctx, fmt.Sprintf(`INSERT INTO aegis_job (queue, kind, args, max_attempts, run_at)
SELECT 'bulk', 'test', '{}', 1, now() - interval '1 hour' FROM generate_series(1, %d)`, CountLimit+5))
	require.NoError(t, err)
	h, err := in.Health(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.EqualValues(t, CountLimit+1, h.Overdue)
}

// ids are the jobs' ids, in order.
func ids(jobs []JobSummary) []int64 {
	out := make([]int64, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// inspector is an Inspector on p, through pgx's database/sql driver.
func inspector(t *testing.T, p *pgxpool.Pool) *Inspector {
	t.Helper()
	db := stdlib.OpenDBFromPool(p)
	t.Cleanup(func() { db.Close() })
	in, err := NewInspector(db, nil)
	require.NoError(t, err)
	return in
}
