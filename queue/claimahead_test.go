package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestClaimAhead: a queue with ClaimAhead keeps up to MaxWorkers +
// ClaimAhead jobs claimed, runs at most MaxWorkers handlers at once, and
// the jobs claimed ahead keep their leases (heartbeats) while they wait,
// then run and complete.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	p := pool(t)
	const maxWorkers, ahead, jobs = 3, 3, 20
	release := make(chan struct{})
	var running, peak, done atomic.Int64
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: maxWorkers, ClaimAhead: ahead}},
		// Heartbeats every 500ms: the waiting claims must be renewed. Long
		// enough that a machine busy with other tests does not delay a
		// heartbeat past the lease, which this test would read as a bug.
		Lease: 1500 * time.Millisecond,
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			block(release, 20*time.Second)
			done.Add(1)
			return ctx.Err()
		}),
	})
	params := make([]EnqueueParams, jobs)
	for i := range params {
		params[i] = EnqueueParams{Args: testArgs{N: i}}
	}
	_, err := c.EnqueueMany(t.Context(), params)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))

	claimed := func() int { return count(t, p, `SELECT count(*) FROM aegis_job WHERE state = 'running'`) }
	eventually(t, "MaxWorkers + ClaimAhead jobs claimed", func() bool { return claimed() == maxWorkers+ahead })
	eventually(t, "MaxWorkers handlers running", func() bool { return running.Load() == maxWorkers })
	// Several lease lengths later the claims, waiting or running, are all
	// still held: heartbeats renewed them, and none was reclaimed.
	start := count(t, p, `SELECT coalesce(sum(token), 0) FROM aegis_job`)
	deadline := time.Now().Add(3 * 1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.Equal(t, maxWorkers+ahead, claimed())
		require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job WHERE state = 'running' AND locked_until < now()`), "an expired lease")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, start, count(t, p, `SELECT coalesce(sum(token), 0) FROM aegis_job`), "a token moved: a claim was reclaimed")
	require.LessOrEqual(t, peak.Load(), int64(maxWorkers))

	close(release)
	eventually(t, "every job completed", func() bool { return count(t, p, `SELECT count(*) FROM aegis_job`) == 0 })
	require.Equal(t, int64(jobs), done.Load())
	require.LessOrEqual(t, peak.Load(), int64(maxWorkers), "more handlers at once than MaxWorkers")
	stop(t, c)
}

// TestClaimAheadStopDeadline: when Stop's deadline passes, the jobs claimed
// ahead (waiting for a worker) are handed back with the running ones, with
// a bumped token, and never started by the stopped client.
func TestClaimAheadStopDeadline(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	const maxWorkers, ahead = 2, 2
	started := make(chan int64, maxWorkers+ahead)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: maxWorkers, ClaimAhead: ahead}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			started <- job.ID
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second): // the test fails first
			}
			return nil
		}),
	})
	var ids []int64
	for range maxWorkers + ahead {
		ids = append(ids, enqueueOne(t, p, nil))
	}
	require.NoError(t, c.Start(ctx))
	for range maxWorkers {
		testenv.Recv(t, started, 20*time.Second, "a job to start")
	}
	eventually(t, "every job claimed", func() bool {
		return count(t, p, `SELECT count(*) FROM aegis_job WHERE state = 'running'`) == maxWorkers+ahead
	})
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Stop(stopCtx), context.DeadlineExceeded)
	for _, id := range ids {
		j := stored(t, p, id)
		require.Equal(t, StateAvailable, j.State, "job %d handed back", id)
		require.EqualValues(t, 2, j.Token, "job %d: the hand-back bumps the token", id)
	}
	require.Len(t, started, 0, "a job claimed ahead started after Stop's deadline")
}
