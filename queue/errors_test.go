package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The error contract of fenced writes, through a real client: whatever
// moved the job's token on, and whether the database or the client's own
// books noticed first, CompleteTx returns an error matching
// aegis.ErrStale, the business write in its transaction is rolled back,
// and the handler's context is cancelled with a cause matching
// aegis.ErrLost. (TestRiverRace checks every other fenced write's
// refusal, statement by statement.)

// completeTxHandler is a handler that waits for the test's go-ahead, then
// writes an effect row and completes the job in one transaction, and
// reports CompleteTx's error and its context's cause.
type completeTxHandler struct {
	started chan *Job[testArgs]
	proceed chan struct{}
	waitCtx bool // wait for the job's context to end before proceeding
	result  chan completeTxResult
}

type completeTxResult struct {
	err   error // CompleteTx's
	cause error // context.Cause of the job's context when it wrote
}

func newCompleteTxHandler(waitCtx bool) *completeTxHandler {
	return &completeTxHandler{
		started: make(chan *Job[testArgs], 1),
		proceed: make(chan struct{}),
		waitCtx: waitCtx,
		result:  make(chan completeTxResult, 1),
	}
}

func (h *completeTxHandler) work(p *pgxpool.Pool) func(ctx context.Context, job *Job[testArgs]) error {
	return func(ctx context.Context, job *Job[testArgs]) error {
		if job.Attempt > 1 {
			return nil // the job reclaimed and claimed again: not this test's
		}
		h.started <- job
		if h.waitCtx {
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute): // the test fails on the cause
			}
		}
		block(h.proceed, time.Minute)
		// The write runs after the loss: its own context, as a handler that
		// did not look at its context would.
		wctx := context.WithoutCancel(ctx)
		var cerr error
		err := pgx.BeginFunc(wctx, p, func(tx pgx.Tx) error {
			if _, err := tx.Exec(wctx, `INSERT INTO effect VALUES ($1, $2)`, job.ID, int64(job.Token)); err != nil {
				return err
			}
			cerr = job.CompleteTx(wctx, tx)
			return cerr
		})
		h.result <- completeTxResult{err: cerr, cause: context.Cause(ctx)}
		return err
	}
}

func TestCompleteTxStale(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// lease: the client's; frozen freezes its heartbeats (a pause);
		// wait makes the handler wait for its context to end.
		lease        time.Duration
		frozen, wait bool
		// takeOver moves the job's token on (or not), while the handler
		// waits.
		takeOver func(t *testing.T, c *Client, id int64)
		// causeIs is what the context's cause must match besides ErrLost.
		causeIs error
		// stale: CompleteTx must be refused; else it must land.
		stale bool
	}{
		{
			// The heartbeat finds the job cancelled first and marks the
			// claim lost; CompleteTx then refuses without a round trip.
			// (It used to return a plain "lost its lease" error.)
			// The lease is long enough that the next heartbeat (within
			// lease/3) comes before the local deadline, under any load.
			name: "heartbeat found the lease lost", lease: 3 * time.Second, wait: true,
			takeOver: func(t *testing.T, c *Client, id int64) {
				require.NoError(t, c.CancelJob(t.Context(), id, "operator"))
			},
			causeIs: aegis.ErrStale, stale: true,
		},
		{
			// Paused (heartbeats frozen): the local deadline cancels the
			// context; the reaper of another client reclaims the job and
			// bumps its token; the database refuses CompleteTx.
			name: "reclaimed while paused", lease: 200 * time.Millisecond, frozen: true, wait: true,
			takeOver: func(t *testing.T, c *Client, id int64) {
				reapJob(t, c.pool, id)
			},
			causeIs: ErrLeaseExpired, stale: true,
		},
		{
			// The local deadline passes, but nobody took the job over: the
			// completion is still tried, fenced, and lands.
			name: "renewal overdue, not taken over", lease: 200 * time.Millisecond, frozen: true, wait: true,
			takeOver: func(t *testing.T, c *Client, id int64) {},
			causeIs:  ErrLeaseExpired, stale: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := pool(t)
			ctx := t.Context()
			_, err := p.Exec(ctx, `CREATE TABLE effect (job_id bigint PRIMARY KEY, token bigint NOT NULL)`)
			require.NoError(t, err)
			h := newCompleteTxHandler(tc.wait)
			frozen := make(chan struct{})
			var thaw sync.Once
			cfg := &Config{
				Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
				Workers:      workers(h.work(p)),
				Lease:        tc.lease,
				ReapInterval: time.Hour, // only the test reaps
			}
			if tc.frozen {
				cfg.hooks = &testHooks{heartbeat: func() { block(frozen, time.Minute) }}
			}
			c := client(t, p, cfg)
			t.Cleanup(func() { thaw.Do(func() { close(frozen) }) }) // before c's Stop
			require.NoError(t, c.Start(ctx))
			res, err := c.Enqueue(ctx, testArgs{}, nil)
			require.NoError(t, err)
			testenv.Recv(t, h.started, 20*time.Second, "the handler to start")
			tc.takeOver(t, c, res.Job.ID)
			close(h.proceed)
			got := testenv.Recv(t, h.result, 20*time.Second, "the handler's CompleteTx")

			require.ErrorIs(t, got.cause, aegis.ErrLost, "the handler's context is cancelled with a cause matching aegis.ErrLost")
			require.ErrorIs(t, got.cause, tc.causeIs)
			if !tc.stale {
				require.NoError(t, got.err)
				eventually(t, "the job is completed", func() bool {
					return count(t, p, `SELECT count(*) FROM aegis_job WHERE id = $1`, res.Job.ID) == 0
				})
				require.Equal(t, 1, count(t, p, `SELECT count(*) FROM effect`))
				return
			}
			require.ErrorIs(t, got.err, aegis.ErrStale)
			require.ErrorContains(t, got.err, "CompleteTx job")
			require.Zero(t, count(t, p, `SELECT count(*) FROM effect`), "the business write was rolled back")
			eventually(t, "the refusal is counted", func() bool {
				return testutil.ToFloat64(c.metrics.stale(DefaultQueue, "complete_tx")) == 1
			})
		})
	}
}

// TestCompleteTxAfterStop: Stop's deadline passes while a handler runs;
// its lease is handed back with a greater token; its context's cause is
// ErrStopping (matching aegis.ErrLost); its CompleteTx afterwards is
// refused with aegis.ErrStale.
func TestCompleteTxAfterStop(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	_, err := p.Exec(ctx, `CREATE TABLE effect (job_id bigint PRIMARY KEY, token bigint NOT NULL)`)
	require.NoError(t, err)
	h := newCompleteTxHandler(true)
	c := client(t, p, &Config{
		Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(h.work(p)),
	})
	require.NoError(t, c.Start(ctx))
	res, err := c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	testenv.Recv(t, h.started, 20*time.Second, "the handler to start")
	stopCtx, cancel := context.WithCancel(ctx)
	cancel() // no grace: hand the lease back at once
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(stopCtx) }()
	eventually(t, "the lease is handed back", func() bool {
		return stored(t, p, res.Job.ID).State == StateAvailable
	})
	close(h.proceed)
	got := testenv.Recv(t, h.result, 20*time.Second, "the handler's CompleteTx")
	require.ErrorIs(t, testenv.Recv(t, stopped, 20*time.Second, "Stop to return"), context.Canceled)
	require.ErrorIs(t, got.cause, ErrStopping)
	require.ErrorIs(t, got.cause, aegis.ErrLost)
	require.ErrorIs(t, got.err, aegis.ErrStale)
	require.Zero(t, count(t, p, `SELECT count(*) FROM effect`))
	require.EqualValues(t, 2, stored(t, p, res.Job.ID).Token)
}

// TestCompleteTxMisuse: calling CompleteTx twice, or outside a handler, is
// an error that does not claim the token moved on.
func TestCompleteTxMisuse(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	errs := make(chan error, 1)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				if err := job.CompleteTx(ctx, tx); err != nil {
					return err
				}
				errs <- job.CompleteTx(ctx, tx)
				return nil
			})
		}),
	})
	require.NoError(t, c.Start(ctx))
	res, err := c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	err = testenv.Recv(t, errs, 20*time.Second, "the second CompleteTx")
	require.ErrorContains(t, err, "already completed")
	require.False(t, errors.Is(err, aegis.ErrStale))
	err = res.Job.CompleteTx(ctx, nil)
	require.ErrorContains(t, err, "not being worked")
	require.False(t, errors.Is(err, aegis.ErrStale))
}
