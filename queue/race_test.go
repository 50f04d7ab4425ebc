package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// worker is the statements of one worker: its ID in locked_by and its
// lease. Tests drive claims and fenced writes through the same statements
// the client uses, and play the pause by simply not heartbeating.
func worker(id string, lease time.Duration, keep bool) statements {
	return newStatements(Config{ID: id, Lease: lease, CompletedRetention: map[bool]time.Duration{true: time.Hour}[keep]})
}

// enqueueOne enqueues a testArgs job and returns its id.
func enqueueOne(t testing.TB, p *pgxpool.Pool, opts *EnqueueOpts) int64 {
	t.Helper()
	c, err := New(p, &Config{Logger: quiet(t)})
	require.NoError(t, err)
	res, err := c.Enqueue(t.Context(), testArgs{N: 1}, opts)
	require.NoError(t, err)
	return res.Job.ID
}

// claimOne claims the one available job of the default queue.
func claimOne(t testing.TB, p *pgxpool.Pool, s statements) *JobRow {
	t.Helper()
	jobs, err := s.claim(t.Context(), p, DefaultQueue, 10, "test-claim")
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

// reapOnce waits for the job's lease to expire and reaps it.
func reapJob(t testing.TB, p *pgxpool.Pool, id int64) {
	t.Helper()
	s := worker("reaper", time.Second, false)
	eventually(t, "the reaper reclaims the expired lease", func() bool {
		got, err := s.reap(t.Context(), p, 100)
		require.NoError(t, err)
		for _, r := range got {
			if r.id == id {
				return true
			}
		}
		return false
	})
}

// snapshot is the stored row of a job, live or finished, as text.
func snapshot(t testing.TB, p *pgxpool.Pool, id int64) string {
	t.Helper()
	var s string
	err := p.QueryRow(t.Context(), `SELECT coalesce(
		(SELECT row_to_json(j)::text FROM aegis_job j WHERE id = $1),
		(SELECT row_to_json(f)::text FROM aegis_job_finished f WHERE id = $1), '')`, id).Scan(&s)
	require.NoError(t, err)
	return s
}

// TestRiverRace is the race River loses, for every write after a claim:
// worker A claims a job and stops heartbeating (a pause); its lease
// expires; the reaper reclaims the job with a new token; worker B claims it
// with a greater token. A's write is rejected and changes nothing; B's
// lands.
func TestRiverRace(t *testing.T) {
	t.Parallel()
	type write func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error
	one := func(id int64, token aegis.Token) ([]int64, []int64) { return []int64{id}, []int64{int64(token)} }
	// first is the result of a batch statement for its one claim.
	first := func(res []error, err error) error {
		if err != nil {
			return err
		}
		return res[0]
	}
	ops := []struct {
		name  string
		write write
		// landed checks B's write.
		landed func(t *testing.T, p *pgxpool.Pool, b *JobRow)
	}{
		{"heartbeat", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			ids, tokens := one(j.ID, j.Token)
			return first(s.heartbeat(ctx, p, ids, tokens))
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			require.Equal(t, 1, count(t, p, `SELECT count(*) FROM aegis_job WHERE id = $1 AND locked_until > now() + interval '50 seconds'`, b.ID))
		}},
		{"complete", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			return s.completeOne(ctx, p, j.ID, int64(j.Token))
		}, completedBy},
		{"complete batch", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			ids, tokens := one(j.ID, j.Token)
			return first(s.completeBatch(ctx, p, ids, tokens))
		}, completedBy},
		{"complete tx", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			// The refusal rolls the business write back.
			return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO effect VALUES ($1, $2)`, j.ID, int64(j.Token)); err != nil {
					return err
				}
				return s.completeOne(ctx, tx, j.ID, int64(j.Token))
			})
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			completedBy(t, p, b)
			require.Equal(t, int(b.Token), count(t, p, `SELECT token FROM effect WHERE job_id = $1`, b.ID))
			require.Equal(t, 1, count(t, p, `SELECT count(*) FROM effect`), "A's business write was rolled back")
		}},
		{"retry", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			return s.retry(ctx, p, j.ID, int64(j.Token), time.Hour, "failed by "+s.by)
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			j := stored(t, p, b.ID)
			require.Equal(t, StateScheduled, j.State)
			require.Equal(t, b.Token+1, j.Token)
			require.Equal(t, "failed by B", j.Errors[len(j.Errors)-1].Error)
			require.Equal(t, b.Token, j.Errors[len(j.Errors)-1].Token)
		}},
		{"snooze", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			return s.snooze(ctx, p, j.ID, int64(j.Token), time.Hour)
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			j := stored(t, p, b.ID)
			require.Equal(t, StateScheduled, j.State)
			require.Equal(t, b.Token+1, j.Token)
			require.Equal(t, b.Attempt-1, j.Attempt)
		}},
		{"cancel", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			return s.finish(ctx, p, j.ID, int64(j.Token), StateCancelled, "cancelled by "+s.by)
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			j := stored(t, p, b.ID)
			require.Equal(t, StateCancelled, j.State)
			require.Equal(t, "cancelled by B", j.Errors[len(j.Errors)-1].Error)
		}},
		{"discard", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			return s.finish(ctx, p, j.ID, int64(j.Token), StateDiscarded, "discarded by "+s.by)
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			j := stored(t, p, b.ID)
			require.Equal(t, StateDiscarded, j.State)
			require.Equal(t, "discarded by B", j.Errors[len(j.Errors)-1].Error)
		}},
		{"hand back", func(ctx context.Context, p *pgxpool.Pool, s statements, j *JobRow) error {
			ids, tokens := one(j.ID, j.Token)
			return first(s.handBack(ctx, p, ids, tokens))
		}, func(t *testing.T, p *pgxpool.Pool, b *JobRow) {
			j := stored(t, p, b.ID)
			require.Equal(t, StateAvailable, j.State)
			require.Equal(t, b.Token+1, j.Token)
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			p := pool(t)
			ctx := t.Context()
			_, err := p.Exec(ctx, `CREATE TABLE effect (job_id bigint PRIMARY KEY, token bigint NOT NULL)`)
			require.NoError(t, err)
			id := enqueueOne(t, p, nil)

			// A claims with a short lease and pauses: no heartbeat.
			a := worker("A", time.Millisecond, true)
			ja := claimOne(t, p, a)
			require.EqualValues(t, 1, ja.Token)

			// The lease expires; the reaper reclaims with a new token; B claims.
			reapJob(t, p, id)
			b := worker("B", time.Minute, true)
			jb := claimOne(t, p, b)
			require.Greater(t, jb.Token, ja.Token)
			require.Equal(t, "B", jb.LockedBy)

			// A wakes up and writes with its old token: refused with an
			// error that matches aegis.ErrStale, and nothing changes.
			before := snapshot(t, p, id)
			err = op.write(ctx, p, a, ja)
			require.ErrorIs(t, err, aegis.ErrStale, "A's %s with the stale token %d must be refused", op.name, ja.Token)
			require.ErrorContains(t, err, fmt.Sprintf("job %d with token %d refused", id, ja.Token))
			require.Equal(t, before, snapshot(t, p, id), "A's refused %s changed the job", op.name)

			// B's write lands.
			require.NoError(t, op.write(ctx, p, b, jb), "B's %s with the current token %d must land", op.name, jb.Token)
			op.landed(t, p, jb)
		})
	}
}

// stored reads a job, live or finished.
func stored(t testing.TB, p *pgxpool.Pool, id int64) *JobRow {
	t.Helper()
	j, err := scanJob(p.QueryRow(t.Context(), jobSQL, id), true)
	require.NoError(t, err)
	return j
}

// completedBy checks the job was completed by the claim b.
func completedBy(t *testing.T, p *pgxpool.Pool, b *JobRow) {
	t.Helper()
	j := stored(t, p, b.ID)
	require.Equal(t, StateCompleted, j.State)
	require.Equal(t, b.Token, j.Token)
	require.Equal(t, "B", j.LockedBy)
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job WHERE id = $1`, b.ID))
}

// TestRiverRaceClients plays the same race with two real clients: A's
// heartbeats are frozen (as if its process were paused) while its handler
// runs; B's reaper reclaims the job and B completes it; then A's handler
// returns and A's batched completion is rejected by the fence.
func TestRiverRaceClients(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()

	frozen := make(chan struct{})
	var unfreeze sync.Once
	thaw := func() { unfreeze.Do(func() { close(frozen) }) }
	startedA := make(chan aegis.Token, 1)
	finishA := make(chan struct{})
	regA := prometheus.NewRegistry()
	a := client(t, p, &Config{
		ID:     "A",
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			startedA <- job.Token
			block(finishA, time.Minute) // paused: ignores its context
			return nil
		}),
		// 2s: A's handler must start within the lease it claimed (a
		// 300ms lease lapsed first on a loaded machine, and A claimed
		// again); B reaps it once the frozen heartbeats let it lapse.
		Lease:              2 * time.Second,
		ReapInterval:       time.Hour, // only B reaps
		Registerer:         regA,
		CompletedRetention: time.Hour,
		hooks:              &testHooks{heartbeat: func() { block(frozen, time.Minute) }},
	})
	t.Cleanup(thaw) // before A's Stop
	require.NoError(t, a.Start(ctx))
	res, err := a.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, testenv.Recv(t, startedA, 20*time.Second, "A to start the job"))

	var ranB set
	var tokenB aegis.Token
	b := client(t, p, &Config{
		ID:     "B",
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			ranB.add(job.ID)
			tokenB = job.Token
			return nil
		}),
		Lease:              time.Minute,
		ReapInterval:       10 * time.Millisecond,
		CompletedRetention: time.Hour,
	})
	require.NoError(t, b.Start(ctx))
	eventually(t, "B completes the reclaimed job", func() bool {
		j, err := b.Job(ctx, res.Job.ID)
		return err == nil && j.State == StateCompleted
	})
	stop(t, b)
	require.EqualValues(t, 3, tokenB, "claim 1 (A), reap 2, claim 3 (B)")

	// A wakes up: its completion is rejected.
	close(finishA)
	eventually(t, "A's completion is rejected", func() bool {
		return testutil.ToFloat64(a.metrics.stale(DefaultQueue, "complete")) == 1
	})
	thaw()
	stop(t, a)
	require.Zero(t, testutil.ToFloat64(a.metrics.completed(DefaultQueue)))
	require.Equal(t, 1, ranB.get(res.Job.ID))
	j, err := b.Job(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, StateCompleted, j.State)
	require.Equal(t, "B", j.LockedBy)
	require.EqualValues(t, 3, j.Token)
}

// TestReaperNeverReclaimsCompleted: a job completed after its lease expired
// but before any reaper ran is completed for good; and under a reaper
// running concurrently with completions of expired leases, every job ends
// either completed or reclaimed, never both.
func TestReaperNeverReclaimsCompleted(t *testing.T) {
	t.Parallel()
	t.Run("completed after expiry", func(t *testing.T) {
		t.Parallel()
		p := pool(t)
		ctx := t.Context()
		id := enqueueOne(t, p, nil)
		a := worker("A", time.Millisecond, true)
		j := claimOne(t, p, a)
		eventually(t, "the lease expires", func() bool {
			return count(t, p, `SELECT count(*) FROM aegis_job WHERE id = $1 AND locked_until < now()`, id) == 1
		})
		require.NoError(t, a.completeOne(ctx, p, j.ID, int64(j.Token)), "no one took the job over: the completion lands")
		got, err := worker("reaper", time.Second, false).reap(ctx, p, 100)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, StateCompleted, stored(t, p, id).State)
	})
	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		p := pool(t)
		ctx := t.Context()
		const n = 300
		c, err := New(p, &Config{Logger: quiet(t)})
		require.NoError(t, err)
		params := make([]EnqueueParams, n)
		for i := range params {
			params[i] = EnqueueParams{Args: testArgs{N: i}}
		}
		_, err = c.EnqueueMany(ctx, params)
		require.NoError(t, err)
		a := worker("A", time.Millisecond, true)
		jobs, err := a.claim(ctx, p, DefaultQueue, n, "test-claim")
		require.NoError(t, err)
		require.Len(t, jobs, n)

		var completed, reaped set
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		wg.Go(func() { // A completes its (expired) claims in batches of 10
			for i := 0; i < n; i += 10 {
				var ids, tokens []int64
				for _, j := range jobs[i : i+10] {
					ids, tokens = append(ids, j.ID), append(tokens, int64(j.Token))
				}
				res, err := a.completeBatch(ctx, p, ids, tokens)
				if err != nil {
					errs <- err
					return
				}
				for k, err := range res {
					switch {
					case err == nil:
						completed.add(ids[k])
					case !errors.Is(err, aegis.ErrStale):
						errs <- err
						return
					}
				}
			}
		})
		wg.Go(func() { // the reaper runs meanwhile, in small batches
			r := worker("reaper", time.Second, false)
			deadline := time.Now().Add(20 * time.Second)
			for completed.len()+reaped.len() < n && time.Now().Before(deadline) {
				got, err := r.reap(ctx, p, 7)
				if err != nil {
					errs <- err
					return
				}
				for _, x := range got {
					reaped.add(x.id)
				}
			}
		})
		testenv.Wait(t, &wg, time.Minute, "the racing goroutines")
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, n, completed.len()+reaped.len())
		for _, j := range jobs {
			c, r := completed.get(j.ID), reaped.get(j.ID)
			require.Equal(t, 1, c+r, "job %d: completed %d, reaped %d", j.ID, c, r)
			s := stored(t, p, j.ID)
			if c == 1 {
				require.Equal(t, StateCompleted, s.State)
				require.Equal(t, j.Token, s.Token)
			} else {
				require.Equal(t, StateAvailable, s.State)
				require.Equal(t, j.Token+1, s.Token)
			}
		}
		t.Logf("completed %d, reclaimed %d", completed.len(), reaped.len())
	})
}

// TestTokenNeverDecreases sends one job through every hand-back there is,
// many times, and checks each claim's token is greater than every token
// before it, and the stored token never goes down.
func TestTokenNeverDecreases(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	id := enqueueOne(t, p, &EnqueueOpts{MaxAttempts: 1000})
	s := worker("W", time.Minute, false)
	short := worker("W", time.Millisecond, false)
	last := aegis.Token(0)
	storedToken := func() aegis.Token {
		var tok int64
		require.NoError(t, p.QueryRow(ctx, `SELECT token FROM aegis_job WHERE id = $1`, id).Scan(&tok))
		return aegis.Token(tok)
	}
	for i := range 40 {
		w := s
		if i%4 == 2 {
			w = short // this claim will be reaped
		}
		j := claimOne(t, p, w)
		require.Greater(t, j.Token, last, "round %d: the claim's token", i)
		last = j.Token
		var err error
		switch i % 4 {
		case 0:
			err = w.retry(ctx, p, id, int64(j.Token), 0, "retry")
		case 1:
			err = w.snooze(ctx, p, id, int64(j.Token), 0)
		case 2:
			reapJob(t, p, id)
		case 3:
			var res []error
			res, err = w.handBack(ctx, p, []int64{id}, []int64{int64(j.Token)})
			if err == nil {
				err = res[0]
			}
		}
		require.NoError(t, err)
		after := storedToken()
		require.Greater(t, after, last, "round %d: the hand-back bumps the token", i)
		last = after
	}
}

// TestReaperDiscardsLastAttempt: a job whose lease expires on its last
// attempt goes to the dead letters, with a bumped token.
func TestReaperDiscardsLastAttempt(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	id := enqueueOne(t, p, &EnqueueOpts{MaxAttempts: 1})
	a := worker("A", time.Millisecond, false)
	j := claimOne(t, p, a)
	s := worker("reaper", time.Second, false)
	eventually(t, "the reaper discards the job", func() bool {
		got, err := s.reap(ctx, p, 10)
		require.NoError(t, err)
		return len(got) == 1 && got[0].id == id && !got[0].available
	})
	d := stored(t, p, id)
	require.Equal(t, StateDiscarded, d.State)
	require.Equal(t, j.Token+1, d.Token)
	require.Contains(t, d.Errors[0].Error, "discarded by the reaper")
	require.ErrorIs(t, a.completeOne(ctx, p, id, int64(j.Token)), aegis.ErrStale, "the discarded job's old holder cannot complete it")
}

// TestReapersNeverFight: several reapers run at once over the same expired
// leases; each job is reclaimed by exactly one of them, once, and its
// token bumped once. A lease renewed before the reapers look is not
// reclaimed.
func TestReapersNeverFight(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	const n = 200
	c, err := New(p, &Config{Logger: quiet(t)})
	require.NoError(t, err)
	params := make([]EnqueueParams, n+1)
	for i := range params {
		params[i] = EnqueueParams{Args: testArgs{N: i}}
	}
	_, err = c.EnqueueMany(ctx, params)
	require.NoError(t, err)
	jobs, err := worker("A", time.Millisecond, false).claim(ctx, p, DefaultQueue, n+1, "test-claim")
	require.NoError(t, err)
	require.Len(t, jobs, n+1)
	eventually(t, "the leases expire", func() bool {
		return count(t, p, `SELECT count(*) FROM aegis_job WHERE locked_until < now()`) == n+1
	})
	// The last job's holder renews its lease first: it is no longer expired.
	kept := jobs[n]
	res, err := worker("A", time.Minute, false).heartbeat(ctx, p, []int64{kept.ID}, []int64{int64(kept.Token)})
	require.NoError(t, err)
	require.NoError(t, res[0], "renewed")

	var reaped set
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			r := worker("reaper", time.Minute, false)
			for range 50 {
				got, err := r.reap(ctx, p, 13)
				if err != nil {
					errs <- err
					return
				}
				for _, x := range got {
					reaped.add(x.id)
				}
				if len(got) == 0 && reaped.len() == n {
					return
				}
			}
		})
	}
	testenv.Wait(t, &wg, time.Minute, "the reapers")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, reaped.len())
	for _, j := range jobs[:n] {
		require.Equal(t, 1, reaped.get(j.ID), "job %d", j.ID)
		require.Equal(t, j.Token+1, stored(t, p, j.ID).Token, "job %d: one bump", j.ID)
	}
	require.Zero(t, reaped.get(kept.ID), "the renewed lease was not reclaimed")
	require.Equal(t, StateRunning, stored(t, p, kept.ID).State)
}
