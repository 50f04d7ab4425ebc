package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/testing/failpoint"
)

// The queue's failpoint table: every statement of the protocol made to
// fail in turn, three ways (internal/testing/failpoint), on a real
// PostgreSQL, with a real client working real jobs. Each row asserts that
// every job's effect (a fenced write of its handler) is applied exactly
// once, that no job is lost, that a cancelled job never runs again, and
// that the job's record says what happened; its result is the row of
// docs/failpoints.md (TestFailpointTableInDocs).

// fpArgs are the jobs of the failpoint table; Mode says what the handler
// does (fpEnv.handle).
type fpArgs struct {
	Mode string `json:"mode"`
}

func (fpArgs) Kind() string { return "fp" }

// fpText is the error the failing handlers return: a NUL and invalid
// UTF-8, which PostgreSQL refuses in a text.
const fpText = "boom \x00 \xff"

type fpEnv struct {
	t     *testing.T
	p     *pgxpool.Pool
	plan  *failpoint.Plan // the client's statements
	txp   *failpoint.Plan // the handlers' own transactions
	calls set             // handler calls by job id
}

func newFPEnv(t *testing.T) *fpEnv {
	e := &fpEnv{t: t, p: pool(t), plan: failpoint.NewPlan(), txp: failpoint.NewPlan()}
	require.NoError(t, fence.Migrate(t.Context(), e.p))
	_, err := e.p.Exec(t.Context(), `CREATE TABLE fp_effect (job bigint NOT NULL, token bigint NOT NULL)`)
	require.NoError(t, err)
	return e
}

// client starts a client on e's pool, its statements through e.plan.
func (e *fpEnv) client(cfg Config) *Client {
	c := e.stopped(cfg)
	require.NoError(e.t, c.Start(e.t.Context()))
	return c
}

// stopped is client without its Start: it enqueues but works nothing.
func (e *fpEnv) stopped(cfg Config) *Client {
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[fpArgs](e.handle))
	cfg.Workers = ws
	cfg.Queues = map[string]QueueConfig{DefaultQueue: {MaxWorkers: 4}}
	cfg.Lease = cmp.Or(cfg.Lease, 3*time.Second)
	cfg.ReapInterval = cmp.Or(cfg.ReapInterval, 100*time.Millisecond)
	cfg.PollInterval = 50 * time.Millisecond
	cfg.CompletedRetention = time.Hour // completed jobs stay readable
	cfg.RetryBackoff = func(int) time.Duration { return 10 * time.Millisecond }
	cfg.hooks = &testHooks{db: func(d db) db { return e.plan.Pgx(d) }}
	return client(e.t, e.p, &cfg)
}

// handle is the handler of every job of the table.
func (e *fpEnv) handle(ctx context.Context, job *Job[fpArgs]) error {
	e.calls.add(job.ID)
	n := e.calls.get(job.ID)
	switch job.Args.Mode {
	case "fail-once":
		if n == 1 {
			return errors.New(fpText)
		}
	case "snooze-once":
		if n == 1 {
			return Snooze(0)
		}
	case "cancel":
		return Cancel(errors.New("do not retry: " + fpText))
	case "fail":
		return errors.New(fpText)
	case "block-once":
		if n == 1 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Minute):
				return errors.New("block-once: the job's context was not cancelled within 1m")
			}
		}
	case "wait-heartbeats":
		// Runs until the armed heartbeat has failed and two more renewed
		// the lease.
		var fired int
		if !waitFor(ctx, func() bool {
			if fired == 0 && e.plan.Fired("fault") > 0 {
				fired = e.plan.Ran("fault")
			}
			return fired > 0 && e.plan.Ran("fault") >= fired+2
		}) {
			return context.Cause(ctx)
		}
	case "tx":
		return e.effect(ctx, job.JobRow, true)
	}
	return e.effect(ctx, job.JobRow, false)
}

// effect is the job's business write: fenced by its token, in a
// transaction of its own (with the job's CompleteTx when inTx). Its
// commit goes through e.txp.
func (e *fpEnv) effect(ctx context.Context, j *JobRow, inTx bool) error {
	tx, err := e.p.Begin(ctx)
	if err != nil {
		return err
	}
	tx = e.txp.Tx(tx)
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fence.Check(ctx, tx, fmt.Sprintf("job-%d", j.ID), j.Token); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fp_effect VALUES ($1, $2)`, j.ID, int64(j.Token)); err != nil {
		return err
	}
	if inTx {
		if err := j.CompleteTx(ctx, tx); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// waitFor polls cond until it holds (true) or ctx ends (false).
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

func (e *fpEnv) enqueue(c *Client, mode string, opts *EnqueueOpts) int64 {
	res, err := c.Enqueue(e.t.Context(), fpArgs{Mode: mode}, opts)
	require.NoError(e.t, err)
	return res.Job.ID
}

// finished waits until job id is finished and returns it.
func (e *fpEnv) finished(c *Client, id int64) *JobRow {
	var j *JobRow
	eventually(e.t, fmt.Sprintf("job %d finished", id), func() bool {
		var err error
		j, err = c.Job(context.Background(), id)
		require.NoError(e.t, err)
		return !j.FinalizedAt.IsZero()
	})
	return j
}

// once asserts the job ran calls times, its effect landed once, it
// finished in state, and its record has the errors want (texts, oldest
// first).
func (e *fpEnv) once(c *Client, id int64, calls int, state State, want ...string) *JobRow {
	t := e.t
	j := e.finished(c, id)
	require.Equal(t, state, j.State, "job %d's state", id)
	require.Equal(t, calls, e.calls.get(id), "job %d's handler calls", id)
	effects := 0
	if state == StateCompleted {
		effects = 1
	}
	require.Equal(t, effects, count(t, e.p, `SELECT count(*) FROM fp_effect WHERE job = $1`, id), "job %d's effect applied", id)
	var got []string
	for _, er := range j.Errors {
		got = append(got, er.Error)
	}
	require.Equal(t, want, got, "job %d's recorded errors", id)
	eventually(t, "the client is done with every claim", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.runs) == 0 && c.writing == 0
	})
	for _, op := range []string{"complete", "retry", "snooze", "cancel", "discard", "heartbeat"} {
		require.Zero(t, testutil.ToFloat64(c.metrics.stale(DefaultQueue, op)), "no write of job %d called stale (%s)", id, op)
	}
	return j
}

// noted is text as a try after a Before fault records it.
func noted(text, op string, id int64, f failpoint.Fault) string {
	if f != failpoint.Before {
		return text
	}
	return fmt.Sprintf("%s [recorded on try 2; try 1 failed: %s job %d: failpoint fault: connection broken before the statement was sent]", text, op, id)
}

// fpCase is a row group of the table: one statement, three faults.
type fpCase struct {
	stmt   string
	match  func() string // a fragment of its SQL
	result map[failpoint.Fault]string
	run    func(e *fpEnv, f failpoint.Fault)
}

// all is a result that does not depend on the fault.
func all(s string) map[failpoint.Fault]string {
	return map[failpoint.Fault]string{failpoint.Before: s, failpoint.After: s, failpoint.Data: s}
}

var fpCases = []fpCase{
	{
		stmt:  "enqueue",
		match: func() string { return "INSERT INTO aegis_job (queue, kind, args" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "Enqueue fails (safe to retry); nothing is inserted; the retry enqueues the job; it runs once",
			failpoint.After:  "Enqueue fails saying the job may be enqueued; it is; the retry with the same UniqueKey returns it (Duplicate); it runs once",
			failpoint.Data:   "Enqueue fails with the server's refusal, matching aegis.ErrInvalid; nothing is inserted; the retry enqueues it; it runs once",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			// Started after the retry: a job finished before it would no
			// longer be a duplicate.
			c := e.stopped(Config{})
			opts := &EnqueueOpts{UniqueKey: "the-job"}
			_, err := c.Enqueue(e.t.Context(), fpArgs{Mode: "ok"}, opts)
			require.Error(e.t, err)
			switch f {
			case failpoint.After:
				require.ErrorContains(e.t, err, "may have been enqueued")
			case failpoint.Data:
				require.ErrorIs(e.t, err, aegis.ErrInvalid)
			}
			res, err := c.Enqueue(e.t.Context(), fpArgs{Mode: "ok"}, opts)
			require.NoError(e.t, err)
			require.Equal(e.t, f == failpoint.After, res.Duplicate)
			require.Equal(e.t, 1, count(e.t, e.p, `SELECT count(*) FROM aegis_job`))
			require.NoError(e.t, c.Start(e.t.Context()))
			e.once(c, res.Job.ID, 1, StateCompleted)
		},
	},
	{
		stmt:  "claim",
		match: func() string { return "FROM aegis_job_next(" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "the claim fails; the next claim takes the job; it runs once, attempt 1",
			failpoint.After:  "the claim committed: the client finds the jobs by the claim's id and runs them; once, attempt 1, the reaper not involved",
			failpoint.Data:   "the claim fails; the next claim takes the job; it runs once, attempt 1",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{Lease: time.Minute}) // only adoption runs it at once
			id := e.enqueue(c, "ok", nil)
			j := e.once(c, id, 1, StateCompleted)
			require.Equal(e.t, 1, j.Attempt)
		},
	},
	{
		stmt:   "heartbeat",
		match:  func() string { return "SET locked_until = now()" },
		result: all("the renewal is retried a quarter interval later, before the lease can expire; the job runs on, once, attempt 1"),
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "wait-heartbeats", nil)
			j := e.once(c, id, 1, StateCompleted)
			require.Equal(e.t, 1, j.Attempt)
			require.Zero(e.t, testutil.ToFloat64(c.metrics.leasesLost(DefaultQueue)))
		},
	},
	{
		stmt:  "complete (batched)",
		match: func() string { return completeKeepManySQL }, // fpEnv.client keeps completed jobs
		result: map[failpoint.Fault]string{
			failpoint.Before: "retried with the same tokens; the job completes once",
			failpoint.After:  "the retry finds the token moved on; reading the job shows the completion landed: completed once, not counted stale",
			failpoint.Data:   "retried with the same tokens; the job completes once",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "ok", nil)
			e.once(c, id, 1, StateCompleted)
			eventually(e.t, "completed counted", func() bool { return testutil.ToFloat64(c.metrics.completed(DefaultQueue)) == 1 })
		},
	},
	{
		stmt:  "complete (SyncComplete)",
		match: func() string { return completeKeepSQL },
		result: map[failpoint.Fault]string{
			failpoint.Before: "retried with the same token; the job completes once",
			failpoint.After:  "the retry finds the token moved on; reading the job shows the completion landed: completed once, not counted stale",
			failpoint.Data:   "retried with the same token; the job completes once",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{SyncComplete: true})
			id := e.enqueue(c, "ok", nil)
			e.once(c, id, 1, StateCompleted)
			eventually(e.t, "completed counted", func() bool { return testutil.ToFloat64(c.metrics.completed(DefaultQueue)) == 1 })
		},
	},
	{
		stmt:  "complete in the handler's transaction (CompleteTx, its COMMIT)",
		match: func() string { return "COMMIT" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "the transaction rolls back, effect and completion together; the handler fails; attempt 2 applies it: once",
			failpoint.After:  "the commit landed; the handler fails; the client reads the job, finds it completed, and writes no retry over it: once",
			failpoint.Data:   "the transaction rolls back, effect and completion together; the handler fails; attempt 2 applies it: once",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "tx", nil)
			calls, errs := 2, []string{"attempt 1's error"}
			if f == failpoint.After {
				calls, errs = 1, nil
			}
			j := e.finished(c, id)
			if len(errs) > 0 {
				require.Len(e.t, j.Errors, 1)
				errs = []string{j.Errors[0].Error}
				require.Contains(e.t, errs[0], map[failpoint.Fault]string{failpoint.Before: "failpoint", failpoint.Data: "SQLSTATE 22021"}[f], "attempt 1's error is the commit's")
			}
			e.once(c, id, calls, StateCompleted, errs...)
		},
	},
	{
		stmt:  "retry",
		match: func() string { return retrySQL },
		result: map[failpoint.Fault]string{
			failpoint.Before: "written on the next try, its text cleaned and noting the failed try; attempt 2 runs after the backoff; the failure is recorded once",
			failpoint.After:  "the retry finds the token moved on; reading the job finds this write's record: landed; the failure is recorded once",
			failpoint.Data:   "written again at once with the text as ASCII; the failure is recorded once, in ASCII",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "fail-once", nil)
			want := errtext.Clean(fpText)
			if f == failpoint.Data {
				j := e.finished(c, id)
				require.Len(e.t, j.Errors, 1)
				want = j.Errors[0].Error
				require.True(e.t, strings.HasPrefix(want, "the error text was refused by the store"), want)
				require.Contains(e.t, want, strconv.QuoteToASCII(errtext.Clean(fpText)), "the text, quoted in ASCII")
			}
			e.once(c, id, 2, StateCompleted, noted(want, "retry", id, f))
		},
	},
	{
		stmt:  "snooze",
		match: func() string { return snoozeSQL },
		result: map[failpoint.Fault]string{
			failpoint.Before: "written on the next try; the job runs again once, its attempt not counted",
			failpoint.After:  "the retry finds the token moved on; reading the job shows the snooze landed; the job runs again once",
			failpoint.Data:   "written on the next try; the job runs again once, its attempt not counted",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "snooze-once", nil)
			j := e.once(c, id, 2, StateCompleted)
			require.Equal(e.t, 1, j.Attempt)
			eventually(e.t, "the snooze counted", func() bool { return testutil.ToFloat64(c.metrics.snoozed(DefaultQueue)) == 1 })
		},
	},
	{
		stmt:  "cancel (the handler's queue.Cancel)",
		match: func() string { return "SELECT id, queue, kind, args, priority, run_at, $3, attempt" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "written on the next try: cancelled, its text cleaned and noting the failed try; the job never runs again",
			failpoint.After:  "the retry finds the token moved on; reading the job finds this write's record: cancelled once; never runs again",
			failpoint.Data:   "written again at once with the text as ASCII: cancelled; never runs again",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "cancel", nil)
			want := errtext.Clean("do not retry: " + fpText)
			if f == failpoint.Data {
				want = e.finished(c, id).Errors[0].Error
				require.True(e.t, strings.HasPrefix(want, "the error text was refused by the store"), want)
			}
			e.once(c, id, 1, StateCancelled, noted(want, "cancel", id, f))
		},
	},
	{
		stmt:  "discard (the last attempt failed)",
		match: func() string { return "SELECT id, queue, kind, args, priority, run_at, $3, attempt" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "written on the next try: discarded, its text cleaned and noting the failed try; the job never runs again",
			failpoint.After:  "the retry finds the token moved on; reading the job finds this write's record: discarded once",
			failpoint.Data:   "written again at once with the text as ASCII: discarded",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "fail", &EnqueueOpts{MaxAttempts: 1})
			want := errtext.Clean(fpText)
			if f == failpoint.Data {
				want = e.finished(c, id).Errors[0].Error
				require.True(e.t, strings.HasPrefix(want, "the error text was refused by the store"), want)
			}
			e.once(c, id, 1, StateDiscarded, noted(want, "discard", id, f))
		},
	},
	{
		stmt:  "reap",
		match: func() string { return "WITH expired AS (" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "the next pass reclaims the expired job; it runs once; the crashed holder's late write is refused by the fence",
			failpoint.After:  "reclaimed (this pass's reply lost); it runs once; the crashed holder's late write is refused by the fence",
			failpoint.Data:   "the next pass reclaims the expired job; it runs once; the crashed holder's late write is refused by the fence",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			// A worker that claimed the job and crashed: its lease expires.
			crashed, err := New(e.p, &Config{Lease: 100 * time.Millisecond, Logger: quiet(e.t)})
			require.NoError(e.t, err)
			id := e.enqueue(crashed, "ok", nil)
			jobs, err := crashed.sql.claim(e.t.Context(), e.p, DefaultQueue, 1, "crashed-claim")
			require.NoError(e.t, err)
			require.Len(e.t, jobs, 1)
			c := e.client(Config{})
			e.once(c, id, 1, StateCompleted, "lease expired: reclaimed by the reaper")
			err = e.effect(e.t.Context(), jobs[0], false)
			require.ErrorIs(e.t, err, aegis.ErrStale, "the crashed holder's write")
		},
	},
	{
		stmt:   "promote (a delayed job becomes available)",
		match:  func() string { return "UPDATE aegis_job j SET state = 'available'" },
		result: all("the next pass promotes it (or this one did, its reply lost); the job runs once"),
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{})
			id := e.enqueue(c, "ok", &EnqueueOpts{Delay: 200 * time.Millisecond})
			e.once(c, id, 1, StateCompleted)
		},
	},
	{
		stmt:  "hand back (Stop's deadline passed)",
		match: func() string { return "WITH back AS (" },
		result: map[failpoint.Fault]string{
			failpoint.Before: "not handed back: the lease expires and another client's reaper reclaims the job; it runs once more, to completion",
			failpoint.After:  "handed back (the reply lost); another client runs the job at once, to completion",
			failpoint.Data:   "not handed back: the lease expires and another client's reaper reclaims the job; it runs once more, to completion",
		},
		run: func(e *fpEnv, f failpoint.Fault) {
			c := e.client(Config{Lease: time.Second})
			id := e.enqueue(c, "block-once", nil)
			eventually(e.t, "the handler runs", func() bool { return e.calls.get(id) == 1 })
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			require.ErrorIs(e.t, c.Stop(ctx), context.DeadlineExceeded)
			e.plan.Disarm()
			other := e.client(Config{})
			want := "handed back: the client stopped before the handler returned"
			if f != failpoint.After {
				want = "lease expired: reclaimed by the reaper"
			}
			e.once(other, id, 2, StateCompleted, want)
		},
	},
}

func TestFailpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range fpCases {
		for _, f := range failpoint.Faults {
			t.Run(tc.stmt+"/"+f.String(), func(t *testing.T) {
				t.Parallel()
				e := newFPEnv(t)
				name := "fault" // the rule's name; wait-heartbeats reads it
				if strings.HasPrefix(tc.stmt, "complete in the handler") {
					e.txp.Arm(name, tc.match(), f, 1)
				} else {
					e.plan.Arm(name, tc.match(), f, 1)
					e.plan.Watch(name, tc.match())
				}
				tc.run(e, f)
				require.Equal(t, 1, e.plan.Fired(name)+e.txp.Fired(name), "the fault fired once")
			})
		}
	}
}

// TestPrune: a failed prune leaves the finished jobs to the next, which
// removes them (or the failed one did, its reply lost); live jobs stay.
func TestFailpointsPrune(t *testing.T) {
	t.Parallel()
	for _, f := range failpoint.Faults {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			e := newFPEnv(t)
			plain, err := New(e.p, &Config{Logger: quiet(t), AllowUnknownKinds: true})
			require.NoError(t, err)
			dead := e.enqueue(plain, "ok", nil)
			require.NoError(t, plain.CancelJob(t.Context(), dead, "by the test"))
			live := e.enqueue(plain, "ok", nil)
			c, err := New(e.p, &Config{Logger: quiet(t), DeadRetention: time.Nanosecond,
				hooks: &testHooks{db: func(d db) db { return e.plan.Pgx(d) }}})
			require.NoError(t, err)
			e.plan.Arm("prune", "DELETE FROM aegis_job_finished", f, 1)
			c.prune(t.Context(), &pass{})
			require.Equal(t, 1, e.plan.Fired("prune"))
			left := 1
			if f == failpoint.After {
				left = 0
			}
			require.Equal(t, left, count(t, e.p, `SELECT count(*) FROM aegis_job_finished WHERE id = $1`, dead))
			c.prune(t.Context(), &pass{})
			require.Zero(t, count(t, e.p, `SELECT count(*) FROM aegis_job_finished WHERE id = $1`, dead), "the next prune removes it")
			require.Equal(t, 1, count(t, e.p, `SELECT count(*) FROM aegis_job WHERE id = $1`, live), "a live job is no prune's")
		})
	}
}

// TestOutcomeTextIsStored: whatever text a handler's error has (a NUL,
// invalid UTF-8, 5 MB), its job runs once and ends as its handler said,
// with the text cleaned (internal/errtext); a panic is stored as its value
// and first frames.
func TestOutcomeTextIsStored(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 5<<20) + "the end"
	for _, tc := range []struct {
		name, text string
		cancel     bool
	}{
		{"cancel NUL", "do not retry: \x00", true},
		{"cancel invalid UTF-8", "do not retry: \xff\xfe", true},
		{"cancel 5 MB", huge, true},
		{"discard NUL", "failed: \x00", false},
		{"discard 5 MB", huge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := pool(t)
			var calls set
			c := client(t, p, &Config{
				Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
				Workers: workers(func(_ context.Context, j *Job[testArgs]) error {
					calls.add(j.ID)
					if tc.cancel {
						return Cancel(errors.New(tc.text))
					}
					return errors.New(tc.text)
				}),
				MaxAttempts:  3,
				Lease:        time.Second,
				ReapInterval: 50 * time.Millisecond,
				RetryBackoff: func(int) time.Duration { return time.Millisecond },
			})
			require.NoError(t, c.Start(t.Context()))
			res, err := c.Enqueue(t.Context(), testArgs{}, &EnqueueOpts{MaxAttempts: map[bool]int{true: 3, false: 1}[tc.cancel]})
			require.NoError(t, err)
			id := res.Job.ID
			var j *JobRow
			eventually(t, "the job finished", func() bool {
				j, err = c.Job(t.Context(), id)
				require.NoError(t, err)
				return !j.FinalizedAt.IsZero()
			})
			want := StateDiscarded
			if tc.cancel {
				want = StateCancelled
			}
			require.Equal(t, want, j.State)
			require.Equal(t, 1, calls.get(id), "the job ran once")
			require.Len(t, j.Errors, 1)
			require.Equal(t, errtext.Clean(tc.text), j.Errors[0].Error)
			require.LessOrEqual(t, len(j.Errors[0].Error), errtext.MaxLen)
		})
	}
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		p := pool(t)
		c := client(t, p, &Config{
			Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
			Workers: workers(func(context.Context, *Job[testArgs]) error { panic("bad \x00 state") }),
		})
		require.NoError(t, c.Start(t.Context()))
		res, err := c.Enqueue(t.Context(), testArgs{}, &EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		var j *JobRow
		eventually(t, "the job finished", func() bool {
			j, err = c.Job(t.Context(), res.Job.ID)
			require.NoError(t, err)
			return !j.FinalizedAt.IsZero()
		})
		require.Equal(t, StateDiscarded, j.State)
		text := j.Errors[0].Error
		require.True(t, strings.HasPrefix(text, "queue: handler panicked: bad \\x00 state\n"), text)
		require.Contains(t, text, "TestOutcomeTextIsStored", "the first frames name the handler")
		require.NotContains(t, text, "runtime/debug.Stack", "the frames start at the panic")
		require.LessOrEqual(t, strings.Count(text, "\n"), 10, "the first frames only:\n%s", text)
	})
}

// TestFailpointTableInDocs: docs/failpoints.md lists the queue's rows of
// the table exactly as fpCases assert them.
func TestFailpointTableInDocs(t *testing.T) {
	t.Parallel()
	var want []string
	for _, tc := range fpCases {
		for _, f := range failpoint.Faults {
			want = append(want, failpoint.Row("queue", tc.stmt, f, tc.result[f]))
		}
	}
	for _, f := range failpoint.Faults {
		want = append(want, failpoint.Row("queue", "prune", f, map[bool]string{
			true:  "pruned (the reply lost); the next prune finds nothing more; live jobs untouched",
			false: "nothing pruned; the next prune removes the finished jobs; live jobs untouched",
		}[f == failpoint.After]))
	}
	failpoint.CheckDoc(t, "../docs/failpoints.md", "queue", want)
}
