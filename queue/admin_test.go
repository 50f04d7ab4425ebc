package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The administration methods need no started client (the console uses
// them on one it never starts), and DiscardDead deletes dead letters only,
// saying what any other job is.
func TestAdminWithoutStartAndDiscardDead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := pool(t)
	admin := client(t, p, nil) // never started
	w := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			if job.Args.N == 2 {
				return errors.New("always")
			}
			return nil
		}),
		CompletedRetention: time.Hour,
		ReapInterval:       50 * time.Millisecond,
	})
	require.NoError(t, w.Start(ctx))
	done, err := w.Enqueue(ctx, testArgs{N: 1}, nil)
	require.NoError(t, err)
	failed, err := w.Enqueue(ctx, testArgs{N: 2}, &EnqueueOpts{MaxAttempts: 1})
	require.NoError(t, err)
	state := func(id int64) State {
		j, err := admin.Job(ctx, id)
		require.NoError(t, err)
		return j.State
	}
	eventually(t, "one job completed, one discarded", func() bool {
		return state(done.Job.ID) == StateCompleted && state(failed.Job.ID) == StateDiscarded
	})
	stop(t, w)
	live, err := admin.Enqueue(ctx, testArgs{N: 3}, nil)
	require.NoError(t, err)

	err = admin.DiscardDead(ctx, live.Job.ID)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "is available, not a dead letter: cancel it first")
	require.Equal(t, StateAvailable, state(live.Job.ID), "a refused discard leaves the job")
	err = admin.DiscardDead(ctx, done.Job.ID)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "is completed, not a dead letter")
	require.Equal(t, StateCompleted, state(done.Job.ID))
	err = admin.DiscardDead(ctx, 1<<40)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "there is no such job")

	require.NoError(t, admin.DiscardDead(ctx, failed.Job.ID), "a discarded job")
	_, err = admin.Job(ctx, failed.Job.ID)
	require.ErrorIs(t, err, ErrNotFound, "gone for good")
	_, err = admin.RetryDead(ctx, failed.Job.ID)
	require.ErrorIs(t, err, ErrNotFound, "and cannot be retried")

	require.NoError(t, admin.CancelJob(ctx, live.Job.ID, "not wanted"))
	require.Equal(t, StateCancelled, state(live.Job.ID))
	dead, err := admin.DeadJobs(ctx, nil)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.NoError(t, admin.DiscardDead(ctx, live.Job.ID), "a cancelled job")
	err = admin.DiscardDead(ctx, live.Job.ID)
	require.ErrorIs(t, err, ErrNotFound, "twice")
	dead, err = admin.DeadJobs(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, dead)

	require.NoError(t, admin.Pause(ctx, DefaultQueue))
	paused, err := admin.Paused(ctx, DefaultQueue)
	require.NoError(t, err)
	require.True(t, paused)
	require.NoError(t, admin.Resume(ctx, DefaultQueue))
}
