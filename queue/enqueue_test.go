package queue

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestUniqueConcurrent enqueues the same unique key from many goroutines
// at once, for many keys: each key gets one job, every caller gets it
// back, and exactly one caller inserted it.
func TestUniqueConcurrent(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, nil)
	const keys, callers = 20, 8
	for k := range keys {
		key := "key-" + strings.Repeat("x", k)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]*Enqueued, callers)
			errs    = make([]error, callers)
		)
		for i := range callers {
			wg.Go(func() {
				select {
				case <-start:
				case <-time.After(30 * time.Second):
					errs[i] = errors.New("the start was not given within 30s")
					return
				}
				results[i], errs[i] = c.Enqueue(ctx, testArgs{N: i}, &EnqueueOpts{UniqueKey: key})
			})
		}
		close(start)
		testenv.Wait(t, &wg, 20*time.Second, "the concurrent enqueues")
		inserted := 0
		for i := range callers {
			require.NoError(t, errs[i])
			require.Equal(t, results[0].Job.ID, results[i].Job.ID, "key %q: every caller gets the one job", key)
			require.Equal(t, key, results[i].Job.UniqueKey)
			if !results[i].Duplicate {
				inserted++
			}
		}
		require.Equal(t, 1, inserted, "key %q: exactly one caller inserted", key)
		require.Equal(t, 1, count(t, p, `SELECT count(*) FROM aegis_job WHERE unique_key = $1`, key))
	}
	require.Equal(t, keys, count(t, p, `SELECT count(*) FROM aegis_job`))
}

// TestUniqueAcrossTransactions: an enqueue of a key another open
// transaction inserted waits for it, then returns its job (commit) or
// inserts its own (rollback); and the key is free again once the job is
// finished.
func TestUniqueAcrossTransactions(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, nil)
	opts := &EnqueueOpts{UniqueKey: "tick/2026-10-01T02:00"}

	for _, commit := range []bool{true, false} {
		tx, err := p.Begin(ctx)
		require.NoError(t, err)
		first, err := c.EnqueueTx(ctx, tx, testArgs{N: 1}, opts)
		require.NoError(t, err)
		require.False(t, first.Duplicate)

		done := make(chan *Enqueued, 1)
		go func() {
			res, err := c.Enqueue(ctx, testArgs{N: 2}, opts)
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		var xid string
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid))
		eventually(t, "the second enqueue waits for the first transaction", func() bool {
			return count(t, p, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND transactionid::text = $1 AND NOT granted`, xid) > 0
		})
		if commit {
			require.NoError(t, tx.Commit(ctx))
			second := testenv.Recv(t, done, 20*time.Second, "the waiting enqueue")
			require.True(t, second.Duplicate)
			require.Equal(t, first.Job.ID, second.Job.ID)
			// Finish the job: the key is free again.
			require.NoError(t, c.CancelJob(ctx, first.Job.ID, "done"))
		} else {
			require.NoError(t, tx.Rollback(ctx))
			second := testenv.Recv(t, done, 20*time.Second, "the waiting enqueue")
			require.False(t, second.Duplicate)
			require.NotEqual(t, first.Job.ID, second.Job.ID)
			require.Equal(t, `{"n": 2}`, string(second.Job.EncodedArgs))
		}
	}
	require.Equal(t, 1, count(t, p, `SELECT count(*) FROM aegis_job WHERE unique_key = $1`, opts.UniqueKey))
}

// TestEnqueueTxRolledBack: a rolled-back EnqueueTx enqueues nothing, and a
// committed one is worked.
func TestEnqueueTxRolledBack(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	var ran set
	c := client(t, p, &Config{
		Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error { ran.add(int64(job.Args.N)); return nil }),
	})
	require.NoError(t, c.Start(ctx))

	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	_, err = c.EnqueueTx(ctx, tx, testArgs{N: 1}, nil)
	require.NoError(t, err)
	_, err = c.EnqueueManyTx(ctx, tx, []EnqueueParams{{Args: testArgs{N: 2}}, {Args: testArgs{N: 3}, Opts: &EnqueueOpts{UniqueKey: "u"}}})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job`))

	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := c.EnqueueTx(ctx, tx, testArgs{N: 4}, nil)
		return err
	})
	require.NoError(t, err)
	eventually(t, "the committed job runs", func() bool { return ran.get(4) == 1 })
	require.Zero(t, ran.get(1)+ran.get(2)+ran.get(3))
}

// TestEnqueueMany inserts with COPY and one by one (unique keys) in one
// transaction, and schedules, prioritizes and queues as asked.
func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, nil)
	existing, err := c.Enqueue(ctx, testArgs{N: -1}, &EnqueueOpts{UniqueKey: "dup"})
	require.NoError(t, err)
	past := time.Now().Add(-time.Hour)
	ids, err := c.EnqueueMany(ctx, []EnqueueParams{
		{Args: testArgs{N: 0}},
		{Args: testArgs{N: 1}, Opts: &EnqueueOpts{Queue: "q2", Priority: 7, MaxAttempts: 3}},
		{Args: testArgs{N: 2}, Opts: &EnqueueOpts{Delay: time.Hour}},
		{Args: testArgs{N: 3}, Opts: &EnqueueOpts{UniqueKey: "dup"}},
		{Args: testArgs{N: 4}, Opts: &EnqueueOpts{UniqueKey: "fresh"}},
		{Args: otherArgs{S: "x"}, Opts: &EnqueueOpts{RunAt: past}},
	})
	require.NoError(t, err)
	require.Len(t, ids, 6)
	require.Equal(t, existing.Job.ID, ids[3], "the duplicate's id is the holder's")
	get := func(i int) *JobRow { return stored(t, p, ids[i]) }
	require.Equal(t, StateAvailable, get(0).State)
	require.Equal(t, DefaultQueue, get(0).Queue)
	require.Equal(t, 25, get(0).MaxAttempts)
	require.Equal(t, "q2", get(1).Queue)
	require.Equal(t, 7, get(1).Priority)
	require.Equal(t, 3, get(1).MaxAttempts)
	require.Equal(t, StateScheduled, get(2).State)
	require.Equal(t, "fresh", get(4).UniqueKey)
	require.Equal(t, "other", get(5).Kind)
	require.Equal(t, `{"s": "x"}`, string(get(5).EncodedArgs))
	require.WithinDuration(t, past, get(5).RunAt, time.Millisecond)
	require.Equal(t, 6, count(t, p, `SELECT count(*) FROM aegis_job`))
}

type badArgs struct{ C chan int }

func (badArgs) Kind() string { return "bad" }

type nanArgs struct{ F float64 }

func (nanArgs) Kind() string { return "nan" }

type emptyKind struct{}

func (emptyKind) Kind() string { return "" }

type ptrArgs struct{}

func (*ptrArgs) Kind() string { return "ptr" }

// TestEnqueueBadInput: each kind of bad input is an error that wraps
// aegis.ErrInvalid and names the problem, and nothing is written.
func TestEnqueueBadInput(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	ws := workers(func(context.Context, *Job[testArgs]) error { return nil })
	AddWorker(ws, WorkFunc[badArgs](func(context.Context, *Job[badArgs]) error { return nil }))
	AddWorker(ws, WorkFunc[nanArgs](func(context.Context, *Job[nanArgs]) error { return nil }))
	c := client(t, p, &Config{Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}}, Workers: ws})
	tests := []struct {
		name string
		args Args
		opts *EnqueueOpts
		want string
	}{
		{"nil args", nil, nil, "args are nil"},
		{"nil pointer args", (*ptrArgs)(nil), nil, "args are a nil *queue.ptrArgs"},
		{"unknown kind", otherArgs{}, nil, `unknown kind "other": no worker is registered`},
		{"empty kind", emptyKind{}, nil, "kind is empty"},
		{"not JSON", badArgs{C: make(chan int)}, nil, `enqueue "bad": the args are not JSON-marshalable: json: unsupported type: chan int`},
		{"NaN", nanArgs{F: math.NaN()}, nil, `enqueue "nan": the args are not JSON-marshalable: json: unsupported value: NaN`},
		{"negative priority", testArgs{}, &EnqueueOpts{Priority: -1}, "EnqueueOpts.Priority -1: must be between 0 (first) and 32767"},
		{"huge priority", testArgs{}, &EnqueueOpts{Priority: 40000}, "EnqueueOpts.Priority 40000"},
		{"negative delay", testArgs{}, &EnqueueOpts{Delay: -time.Second}, "EnqueueOpts.Delay -1s: must not be negative"},
		{"delay and run at", testArgs{}, &EnqueueOpts{Delay: time.Second, RunAt: time.Now()}, "set RunAt or Delay, not both"},
		{"negative attempts", testArgs{}, &EnqueueOpts{MaxAttempts: -2}, "EnqueueOpts.MaxAttempts -2"},
		{"blank queue", testArgs{}, &EnqueueOpts{Queue: " "}, `EnqueueOpts.Queue: queue name " " has leading or trailing white space`},
		{"long queue", testArgs{}, &EnqueueOpts{Queue: strings.Repeat("q", 129)}, "is 129 bytes, more than 128"},
		{"NUL queue", testArgs{}, &EnqueueOpts{Queue: "a\x00b"}, "contains a NUL byte"},
		{"bad UTF-8 queue", testArgs{}, &EnqueueOpts{Queue: "\xff"}, "is not valid UTF-8"},
		{"long unique key", testArgs{}, &EnqueueOpts{UniqueKey: strings.Repeat("k", 1001)}, "UniqueKey is 1001 bytes, more than 1000"},
	}
	for _, tt := range tests {
		_, err := c.Enqueue(ctx, tt.args, tt.opts)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
		require.True(t, strings.HasPrefix(err.Error(), "queue: "), tt.name)
	}
	_, err := c.EnqueueMany(ctx, []EnqueueParams{{Args: testArgs{}}, {Args: testArgs{}, Opts: &EnqueueOpts{Priority: -5}}})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "queue: EnqueueMany: job 1: enqueue \"test\": EnqueueOpts.Priority -5")
	_, err = c.EnqueueTx(ctx, nil, testArgs{}, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "queue: EnqueueTx: tx is nil")
	_, err = c.EnqueueManyTx(ctx, nil, []EnqueueParams{{Args: testArgs{}}})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "queue: EnqueueManyTx: tx is nil")
	require.ErrorIs(t, c.Pause(ctx, ""), aegis.ErrInvalid)
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job`), "nothing was written")

	// An enqueue-only client (no workers) accepts any kind; so does one
	// that allows unknown kinds.
	_, err = client(t, p, nil).Enqueue(ctx, otherArgs{}, nil)
	require.NoError(t, err)
}

// TestConfigErrors: a bad Config is an error that names the field.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ws := workers(func(context.Context, *Job[testArgs]) error { return nil })
	q := map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}}
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Lease: 50 * time.Millisecond}, "Config.Lease 50ms: must be between 100ms and 24h0m0s"},
		{Config{Lease: 25 * time.Hour}, "Config.Lease 25h0m0s"},
		{Config{MaxAttempts: -1}, "Config.MaxAttempts -1: must be at least 1"},
		{Config{PollInterval: time.Microsecond}, "Config.PollInterval 1µs: must be at least 1ms"},
		{Config{ReapInterval: -time.Second}, "Config.ReapInterval -1s"},
		{Config{CompleteBatch: -1}, "Config.CompleteBatch -1"},
		{Config{CompletedRetention: -time.Second}, "Config.CompletedRetention -1s: must not be negative"},
		{Config{DeadRetention: -time.Second}, "Config.DeadRetention -1s"},
		{Config{ID: "a\x00"}, "Config.ID"},
		{Config{Queues: q}, "Config.Workers: the client works queues but has no workers"},
		{Config{Queues: map[string]QueueConfig{"": {MaxWorkers: 1}}, Workers: ws}, "Config.Queues: queue name is empty"},
		{Config{Queues: map[string]QueueConfig{"q": {}}, Workers: ws}, `Config.Queues["q"].MaxWorkers 0: must be between 1 and 10000`},
		{Config{Queues: map[string]QueueConfig{"q": {MaxWorkers: 10001}}, Workers: ws}, `MaxWorkers 10001`},
		{Config{Queues: map[string]QueueConfig{"q": {MaxWorkers: 2, ClaimAhead: -1}}, Workers: ws}, `Config.Queues["q"].ClaimAhead -1: must be between 0 and MaxWorkers (2)`},
		{Config{Queues: map[string]QueueConfig{"q": {MaxWorkers: 2, ClaimAhead: 3}}, Workers: ws}, `ClaimAhead 3`},
	}
	p := pool(t)
	for _, tt := range tests {
		_, err := New(p, &tt.cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.want)
		require.ErrorContains(t, err, tt.want)
	}
	_, err := New(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "queue: New: pool is nil")
	err = Migrate(t.Context(), nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "queue: Migrate: pool is nil")
	c, err := New(p, nil)
	require.NoError(t, err)
	err = c.Start(t.Context())
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "Config.Queues is empty")
	require.NoError(t, c.Stop(t.Context()), "Stop before Start")
}

// TestAddWorkerPanics: registering a kind twice, or an invalid kind, is a
// programming error.
func TestAddWorkerPanics(t *testing.T) {
	t.Parallel()
	ws := workers(func(context.Context, *Job[testArgs]) error { return nil })
	require.PanicsWithValue(t, `queue: AddWorker[queue.testArgs]: kind "test" is already registered`, func() {
		AddWorker(ws, WorkFunc[testArgs](func(context.Context, *Job[testArgs]) error { return nil }))
	})
	require.PanicsWithValue(t, `queue: AddWorker[queue.emptyKind]: kind is empty`, func() {
		AddWorker(ws, WorkFunc[emptyKind](func(context.Context, *Job[emptyKind]) error { return nil }))
	})
}

// TestMissingTables: without Migrate the errors say what to do.
func TestMissingTables(t *testing.T) {
	t.Parallel()
	p, err := New(poolWithoutTables(t), &Config{
		Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(context.Context, *Job[testArgs]) error { return nil }),
		Logger:  quiet(t),
	})
	require.NoError(t, err)
	_, err = p.Enqueue(t.Context(), testArgs{}, nil)
	require.ErrorContains(t, err, "run queue.Migrate, or Client.Migrate for a Config.Table, first")
	err = p.Start(t.Context())
	require.ErrorContains(t, err, "run queue.Migrate, or Client.Migrate for a Config.Table, first")
	require.False(t, errors.Is(err, aegis.ErrInvalid))
}
