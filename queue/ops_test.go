package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestPauseResume: a paused queue claims nothing, across clients; Resume
// wakes idle workers (the poll interval here is an hour).
func TestPauseResume(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	var ran set
	c := client(t, p, &Config{
		Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}, "b": {MaxWorkers: 1}},
		Workers:      workers(func(ctx context.Context, job *Job[testArgs]) error { ran.add(job.ID); return nil }),
		PollInterval: time.Hour,
		Registerer:   reg,
	})
	require.NoError(t, c.Pause(ctx, DefaultQueue))
	paused, err := c.Paused(ctx, DefaultQueue)
	require.NoError(t, err)
	require.True(t, paused)

	// The claim statement itself sees the pause.
	id := enqueueOne(t, p, nil)
	jobs, err := worker("X", time.Minute, false).claim(ctx, p, DefaultQueue, 10, "test-claim")
	require.NoError(t, err)
	require.Empty(t, jobs)

	// A client that was woken (its start, the enqueue's notification)
	// claims nothing while the queue is paused; queue b goes on.
	require.NoError(t, c.Start(ctx))
	claims := func() uint64 {
		var n uint64
		ms, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range ms {
			if mf.GetName() == "aegis_queue_claim_seconds" {
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == DefaultQueue {
						n += m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
		return n
	}
	eventually(t, "the first claim ran", func() bool { return claims() >= 1 })
	before := claims()
	_, err = c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	eventually(t, "the notification woke the producer", func() bool { return claims() > before })
	other, err := c.Enqueue(ctx, testArgs{}, &EnqueueOpts{Queue: "b"})
	require.NoError(t, err)
	eventually(t, "queue b runs", func() bool { return ran.get(other.Job.ID) == 1 })
	require.Zero(t, ran.get(id))
	require.Equal(t, 2, count(t, p, `SELECT count(*) FROM aegis_job WHERE queue = 'default' AND state = 'available'`))

	require.NoError(t, c.Resume(ctx, DefaultQueue))
	eventually(t, "resumed jobs run", func() bool { return ran.len() == 3 })
	paused, err = c.Paused(ctx, DefaultQueue)
	require.NoError(t, err)
	require.False(t, paused)
}

// TestNotifyAndPoll: with an hour's poll interval a job due now starts at
// once (LISTEN/NOTIFY); without LISTEN, polling finds it.
func TestNotifyAndPoll(t *testing.T) {
	t.Parallel()
	for _, listen := range []bool{true, false} {
		t.Run(map[bool]string{true: "notify", false: "poll"}[listen], func(t *testing.T) {
			t.Parallel()
			p := pool(t)
			ctx := t.Context()
			started := make(chan time.Time, 10)
			cfg := &Config{
				Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
				Workers:      workers(func(ctx context.Context, job *Job[testArgs]) error { started <- time.Now(); return nil }),
				PollInterval: time.Hour,
			}
			if !listen {
				cfg.PollInterval = 20 * time.Millisecond
				cfg.hooks = &testHooks{noListen: true}
			}
			c := client(t, p, cfg)
			require.NoError(t, c.Start(ctx))
			// Let the producer go idle (its first claim finds nothing).
			eventually(t, "the producer is idle", func() bool {
				return testutil.CollectAndCount(c.metrics.claimSecondsV) > 0
			})
			for range 3 {
				at := time.Now()
				_, err := c.Enqueue(ctx, testArgs{}, nil)
				require.NoError(t, err)
				select {
				case s := <-started:
					t.Logf("insert to start: %s", s.Sub(at))
				case <-time.After(10 * time.Second):
					t.Fatal("the job did not start")
				}
			}
		})
	}
}

// TestStopGraceful: Stop waits for a running job and writes its outcome.
func TestStopGraceful(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	started, finish := make(chan struct{}), make(chan struct{})
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			close(started)
			block(finish, time.Minute)
			return nil
		}),
	})
	require.NoError(t, c.Start(ctx))
	id := enqueueOne(t, p, nil)
	testenv.Recv(t, started, 20*time.Second, "the job to start")
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctx) }()
	close(finish)
	require.NoError(t, testenv.Recv(t, stopped, 20*time.Second, "Stop to return"))
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job WHERE id = $1`, id), "completed")
	require.ErrorContains(t, c.Start(ctx), "stopped")
}

// TestStopDeadline: when Stop's context ends first, running jobs are
// cancelled (ErrStopping) and their leases handed back with a bumped
// token, so another client runs them at once; the old handler's outcome is
// not written.
func TestStopDeadline(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	started := make(chan struct{}, 2)
	causes := make(chan error, 2)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			started <- struct{}{}
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second): // the test's receive of causes fails first
			}
			causes <- context.Cause(ctx)
			return nil
		}),
	})
	require.NoError(t, c.Start(ctx))
	a, b := enqueueOne(t, p, nil), enqueueOne(t, p, nil)
	testenv.Recv(t, started, 20*time.Second, "the first job to start")
	testenv.Recv(t, started, 20*time.Second, "the second job to start")
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Stop(stopCtx), context.DeadlineExceeded)
	for range 2 {
		require.ErrorIs(t, testenv.Recv(t, causes, 10*time.Second, "a handler's cancelled context"), ErrStopping)
	}
	for _, id := range []int64{a, b} {
		j := stored(t, p, id)
		require.Equal(t, StateAvailable, j.State, "handed back")
		require.EqualValues(t, 2, j.Token)
		require.Contains(t, j.Errors[0].Error, "handed back")
	}

	var ran set
	c2 := client(t, p, &Config{
		Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error { ran.add(int64(job.Token)); return nil }),
	})
	require.NoError(t, c2.Start(ctx))
	eventually(t, "another client runs them", func() bool { return ran.get(3) == 2 })
}

// TestConcurrencyPerQueue: no queue ever runs more jobs at once than its
// MaxWorkers, and each reaches it.
func TestConcurrencyPerQueue(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	limits := map[string]int{"a": 2, "b": 3}
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	release := make(chan struct{})
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{"a": {MaxWorkers: 2}, "b": {MaxWorkers: 3}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			mu.Lock()
			running[job.Queue]++
			peak[job.Queue] = max(peak[job.Queue], running[job.Queue])
			mu.Unlock()
			block(release, time.Minute)
			mu.Lock()
			running[job.Queue]--
			mu.Unlock()
			return nil
		}),
	})
	var params []EnqueueParams
	for range 10 {
		params = append(params, EnqueueParams{Args: testArgs{}, Opts: &EnqueueOpts{Queue: "a"}}, EnqueueParams{Args: testArgs{}, Opts: &EnqueueOpts{Queue: "b"}})
	}
	_, err := c.EnqueueMany(ctx, params)
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	eventually(t, "each queue runs its limit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running["a"] == 2 && running["b"] == 3
	})
	require.Equal(t, 15, count(t, p, `SELECT count(*) FROM aegis_job WHERE state = 'available'`))
	close(release)
	eventually(t, "all done", func() bool { return count(t, p, `SELECT count(*) FROM aegis_job`) == 0 })
	mu.Lock()
	defer mu.Unlock()
	for q, l := range limits {
		require.Equal(t, l, peak[q], "queue %s", q)
	}
}

// TestMetrics: counters land on the registry the user passes, and the
// depth gauge counts the database.
func TestMetrics(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	var fails atomic.Int32
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 4}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			if job.Args.N == 1 && fails.Add(1) == 1 {
				return errors.New("once")
			}
			return nil
		}),
		RetryBackoff: func(int) time.Duration { return 0 },
		Registerer:   reg,
	})
	// A second client on the same registry shares the counters.
	_ = client(t, p, &Config{Registerer: reg})
	_, err := c.EnqueueMany(ctx, []EnqueueParams{{Args: testArgs{N: 0}}, {Args: testArgs{N: 1}}, {Args: testArgs{N: 2}, Opts: &EnqueueOpts{Delay: time.Hour}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	eventually(t, "two completions", func() bool { return testutil.ToFloat64(c.metrics.completed(DefaultQueue)) == 2 })
	require.Equal(t, 3.0, testutil.ToFloat64(c.metrics.claimed(DefaultQueue)))
	require.Equal(t, 1.0, testutil.ToFloat64(c.metrics.failed(DefaultQueue)))
	names := map[string]bool{}
	ms, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range ms {
		names[mf.GetName()] = true
		if mf.GetName() == "aegis_queue_jobs" {
			require.Len(t, mf.GetMetric(), 1)
			require.Equal(t, "scheduled", mf.GetMetric()[0].GetLabel()[1].GetValue())
			require.Equal(t, 1.0, mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	for _, n := range []string{"aegis_queue_claimed_total", "aegis_queue_completed_total", "aegis_queue_failed_total", "aegis_queue_claim_seconds", "aegis_queue_jobs"} {
		require.True(t, names[n], n)
	}
}

// TestPriorityAndSchedule: claims follow priority, then run_at; future
// jobs are scheduled and promoted when due.
func TestPriorityAndSchedule(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, nil)
	for _, pr := range []int{5, 0, 3, 0} {
		_, err := c.Enqueue(ctx, testArgs{N: pr}, &EnqueueOpts{Priority: pr})
		require.NoError(t, err)
	}
	later, err := c.Enqueue(ctx, testArgs{N: 99}, &EnqueueOpts{Delay: time.Hour})
	require.NoError(t, err)
	require.Equal(t, StateScheduled, later.Job.State)
	soon, err := c.Enqueue(ctx, testArgs{N: 98}, &EnqueueOpts{RunAt: time.Now().Add(150 * time.Millisecond)})
	require.NoError(t, err)
	require.Equal(t, StateScheduled, soon.Job.State)

	w := worker("W", time.Minute, false)
	jobs, err := w.claim(ctx, p, DefaultQueue, 10, "test-claim")
	require.NoError(t, err)
	var got []int
	for _, j := range jobs {
		got = append(got, j.Priority)
	}
	require.Equal(t, []int{0, 0, 3, 5}, got)
	require.Less(t, jobs[0].ID, jobs[1].ID, "same priority: first enqueued first")

	d, ok, err := w.nextScheduled(ctx, p)
	require.NoError(t, err)
	require.True(t, ok)
	require.Less(t, d, 150*time.Millisecond)
	eventually(t, "the soon job is promoted", func() bool {
		n, err := w.promote(ctx, p, 10)
		require.NoError(t, err)
		return n == 1
	})
	jobs, err = w.claim(ctx, p, DefaultQueue, 10, "test-claim")
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, soon.Job.ID, jobs[0].ID)
}

// TestPrune: finished jobs past their retention are deleted.
func TestPrune(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, &Config{CompletedRetention: time.Millisecond, DeadRetention: time.Hour})
	a, b := enqueueOne(t, p, nil), enqueueOne(t, p, nil)
	w := worker("W", time.Minute, true)
	jobs, err := w.claim(ctx, p, DefaultQueue, 2, "test-claim")
	require.NoError(t, err)
	require.NoError(t, w.completeOne(ctx, p, jobs[0].ID, int64(jobs[0].Token)))
	require.NoError(t, c.CancelJob(ctx, jobs[1].ID, ""))
	eventually(t, "the completed job is pruned; the dead letter is kept", func() bool {
		c.prune(ctx, &pass{})
		return count(t, p, `SELECT count(*) FROM aegis_job_finished`) == 1
	})
	_, err = c.Job(ctx, a)
	require.ErrorIs(t, err, ErrNotFound)
	j, err := c.Job(ctx, b)
	require.NoError(t, err)
	require.Equal(t, StateCancelled, j.State)
}

// TestHeartbeatKeepsLease: a job running longer than its lease keeps it
// (the reaper runs all along), its lease is renewed with HOT updates, and
// it completes with its first token.
func TestHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	release := make(chan struct{})
	tokens := make(chan int64, 1)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			tokens <- int64(job.Token)
			return nil
		}),
		// Heartbeats every 333ms: one may be 667ms late (a loaded machine)
		// before the lease is in danger. (With 150ms, a heartbeat 100ms
		// late lost it.)
		Lease:              time.Second,
		ReapInterval:       5 * time.Millisecond,
		CompletedRetention: time.Hour,
	})
	require.NoError(t, c.Start(ctx))
	id := enqueueOne(t, p, nil)
	var renewals int
	var last time.Time
	eventually(t, "the lease is renewed 6 times (2 leases)", func() bool {
		var until time.Time
		if err := p.QueryRow(ctx, `SELECT locked_until FROM aegis_job WHERE id = $1 AND state = 'running'`, id).Scan(&until); err != nil {
			return false
		}
		if until.After(last) {
			if !last.IsZero() {
				renewals++
			}
			last = until
		}
		return renewals >= 6
	})
	close(release)
	require.EqualValues(t, 1, testenv.Recv(t, tokens, 20*time.Second, "the handler to return"))
	eventually(t, "completed", func() bool { return stored(t, p, id).State == StateCompleted })
	require.EqualValues(t, 1, stored(t, p, id).Token)
}

// TestHeartbeatIsHOT: a heartbeat changes only locked_until, which no index
// contains, so PostgreSQL updates the row in place (a HOT update: no index
// entries, no new index versions to vacuum).
func TestHeartbeatIsHOT(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	id := enqueueOne(t, p, nil)
	w := worker("W", time.Minute, false)
	j := claimOne(t, p, w)
	// A connection of its own, so that no earlier statement's counts are
	// pending in its statistics.
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	for range 3 {
		res, err := w.heartbeat(ctx, tx, []int64{id}, []int64{int64(j.Token)})
		require.NoError(t, err)
		require.NoError(t, res[0], "renewed")
	}
	var updated, hot int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('aegis_job'::regclass),
		pg_stat_get_xact_tuples_hot_updated('aegis_job'::regclass)`).Scan(&updated, &hot))
	require.Equal(t, 3, updated)
	require.Equal(t, 3, hot, "every heartbeat was a HOT update")
}

// TestListenerReconnects: when the LISTEN connection dies, the listener
// reconnects and wakes the producers (notifications may have been missed
// meanwhile); with an hour's poll interval, only that can start the job.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	var ran set
	c := client(t, p, &Config{
		Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers:      workers(func(ctx context.Context, job *Job[testArgs]) error { ran.add(job.ID); return nil }),
		PollInterval: time.Hour,
	})
	require.NoError(t, c.Start(ctx))
	listenSQL := `SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN "' || $1 || '"'`
	var pid int32
	eventually(t, "the listener is connected", func() bool {
		return p.QueryRow(ctx, listenSQL, c.channel).Scan(&pid) == nil
	})
	var killed bool
	require.NoError(t, p.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	// The job's notification may be sent while no one listens.
	id := enqueueOne(t, p, nil)
	eventually(t, "the job runs after the listener reconnects", func() bool { return ran.get(id) == 1 })
	eventually(t, "the listener listens again", func() bool {
		var again int32
		return p.QueryRow(ctx, listenSQL, c.channel).Scan(&again) == nil && again != pid
	})
	// And notifications arrive again.
	id = enqueueOne(t, p, nil)
	eventually(t, "a job enqueued after the reconnect runs", func() bool { return ran.get(id) == 1 })
}
