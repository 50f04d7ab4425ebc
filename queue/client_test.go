package queue

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestWorkAll runs many jobs through a client, batched and synchronous
// completion, and checks each ran once and left the hot table.
func TestWorkAll(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "batched", true: "sync"}[sync], func(t *testing.T) {
			t.Parallel()
			p := pool(t)
			ctx := t.Context()
			var ran set
			c := client(t, p, &Config{
				Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 20}, "other": {MaxWorkers: 3}},
				Workers:      workers(func(ctx context.Context, job *Job[testArgs]) error { ran.add(job.ID); return nil }),
				SyncComplete: sync,
			})
			const n = 1000
			jobs := make([]EnqueueParams, n)
			for i := range jobs {
				jobs[i] = EnqueueParams{Args: testArgs{N: i}}
				if i%10 == 0 {
					jobs[i].Opts = &EnqueueOpts{Queue: "other", Priority: i % 3}
				}
			}
			ids, err := c.EnqueueMany(ctx, jobs)
			require.NoError(t, err)
			require.Len(t, ids, n)
			require.NoError(t, c.Start(ctx))
			eventually(t, "every job ran", func() bool { return ran.len() == n })
			eventually(t, "every completion is written", func() bool {
				return count(t, p, `SELECT count(*) FROM aegis_job`) == 0
			})
			for _, id := range ids {
				require.Equal(t, 1, ran.get(id), "job %d", id)
			}
			require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job_finished`), "completed jobs are deleted by default")
		})
	}
}

// TestOutcomes covers what a handler can return: complete in its own
// transaction, snooze, retry, cancel, discard after the last attempt.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	_, err := p.Exec(ctx, `CREATE TABLE effect (job_id bigint PRIMARY KEY, token bigint NOT NULL)`)
	require.NoError(t, err)

	var snoozed, failed atomic.Int32
	ws := workers(func(ctx context.Context, job *Job[testArgs]) error {
		switch job.Args.N {
		case 1: // complete with the business write
			return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO effect VALUES ($1, $2)`, job.ID, int64(job.Token)); err != nil {
					return err
				}
				return job.CompleteTx(ctx, tx)
			})
		case 2: // snooze once, then complete
			if snoozed.Add(1) == 1 {
				return Snooze(10 * time.Millisecond)
			}
			return nil
		case 3: // fail once, then complete
			if failed.Add(1) == 1 {
				return errors.New("boom")
			}
			return nil
		case 4:
			return Cancel(errors.New("not wanted"))
		case 5:
			panic("always")
		}
		return nil
	})
	c := client(t, p, &Config{
		Queues:             map[string]QueueConfig{DefaultQueue: {MaxWorkers: 5}},
		Workers:            ws,
		RetryBackoff:       func(int) time.Duration { return 10 * time.Millisecond },
		CompletedRetention: time.Hour,
		ReapInterval:       50 * time.Millisecond,
	})
	require.NoError(t, c.Start(ctx))
	ids := map[int]int64{}
	for n := 1; n <= 5; n++ {
		opts := &EnqueueOpts{}
		if n == 5 {
			opts.MaxAttempts = 2
		}
		res, err := c.Enqueue(ctx, testArgs{N: n}, opts)
		require.NoError(t, err)
		ids[n] = res.Job.ID
	}
	state := func(n int) State {
		j, err := c.Job(ctx, ids[n])
		require.NoError(t, err)
		return j.State
	}
	eventually(t, "every job finished", func() bool {
		return state(1) == StateCompleted && state(2) == StateCompleted && state(3) == StateCompleted &&
			state(4) == StateCancelled && state(5) == StateDiscarded
	})

	j1, _ := c.Job(ctx, ids[1])
	require.Equal(t, int(j1.Token), count(t, p, `SELECT token FROM effect WHERE job_id = $1`, ids[1]))
	j2, _ := c.Job(ctx, ids[2])
	require.Equal(t, 1, j2.Attempt, "a snooze does not count as an attempt")
	require.EqualValues(t, 3, j2.Token, "claim 1, snooze 2, claim 3")
	j3, _ := c.Job(ctx, ids[3])
	require.Equal(t, 2, j3.Attempt)
	require.Len(t, j3.Errors, 1)
	require.Equal(t, "boom", j3.Errors[0].Error)
	require.EqualValues(t, 1, j3.Errors[0].Token)

	dead, err := c.DeadJobs(ctx, nil)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	require.Equal(t, ids[5], dead[0].ID, "newest first")
	require.Equal(t, StateDiscarded, dead[0].State)
	require.Len(t, dead[0].Errors, 2)
	require.Contains(t, dead[0].Errors[1].Error, "panicked: always")
	require.Equal(t, StateCancelled, dead[1].State)
	require.Equal(t, "not wanted", dead[1].Errors[0].Error)

	// Revive the cancelled job: it runs again (and is cancelled again).
	back, err := c.RetryDead(ctx, ids[4])
	require.NoError(t, err)
	require.Equal(t, StateAvailable, back.State)
	require.Greater(t, back.Token, dead[1].Token, "the token never goes back")
	eventually(t, "the revived job is cancelled again", func() bool {
		j, err := c.Job(ctx, ids[4])
		return err == nil && j.State == StateCancelled && j.Token > back.Token
	})
	_, err = c.RetryDead(ctx, ids[1])
	require.ErrorIs(t, err, ErrNotFound, "a completed job is not a dead letter")
}

// TestSnoozeNegative: Snooze with a negative delay is the handler's
// mistake, not a snooze at once: Snooze's error matches aegis.ErrInvalid
// and, returned, fails the attempt with that error recorded.
func TestSnoozeNegative(t *testing.T) {
	t.Parallel()
	err := Snooze(-time.Second)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "queue: Snooze(-1s): the delay must not be negative")
	require.NotErrorIs(t, Snooze(0), aegis.ErrInvalid, "0 snoozes until now")

	p := pool(t)
	ctx := t.Context()
	c := client(t, p, &Config{
		Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers:      workers(func(context.Context, *Job[testArgs]) error { return Snooze(-time.Second) }),
		RetryBackoff: func(int) time.Duration { return time.Hour },
	})
	require.NoError(t, c.Start(ctx))
	id := enqueueOne(t, p, nil)
	eventually(t, "the attempt fails", func() bool {
		j := stored(t, p, id)
		return j.State == StateScheduled && len(j.Errors) > 0
	})
	j := stored(t, p, id)
	require.Equal(t, 1, j.Attempt, "the attempt counted")
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Error, "Snooze(-1s)")
}

// TestLeaseLostCancelsHandler: when the database says the lease is gone
// (here the job is cancelled from outside), the next heartbeat cancels the
// handler's context with aegis.ErrLost and nothing more is written.
func TestLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	started := make(chan int64, 1)
	causes := make(chan error, 1)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			started <- job.ID
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second): // the test's receive of causes fails first
			}
			causes <- context.Cause(ctx)
			return nil // would complete, but the lease is lost
		}),
		// Long enough that the next heartbeat (within Lease/3) finds the
		// cancellation before the local deadline could: the cause must be
		// the heartbeat's refusal, whatever the machine's load.
		Lease: 3 * time.Second,
	})
	require.NoError(t, c.Start(ctx))
	res, err := c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, res.Job.ID, testenv.Recv(t, started, 20*time.Second, "the job to start"))
	require.NoError(t, c.CancelJob(ctx, res.Job.ID, "operator"))
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, aegis.ErrLost)
		require.ErrorIs(t, cause, aegis.ErrStale, "the heartbeat's refusal is in the cause")
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	stop(t, c)
	j, err := c.Job(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, StateCancelled, j.State, "the handler's nil did not complete it")
	require.Equal(t, "operator", j.Errors[len(j.Errors)-1].Error)
}
