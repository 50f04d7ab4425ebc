package queue

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// benchPool is a pool of queuebench's size on a schema of its own.
func benchPool(b *testing.B) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	require.NoError(b, err)
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(p.Close)
	require.NoError(b, Migrate(b.Context(), p))
	return p
}

// BenchmarkBurnDown works b.N no-op jobs enqueued beforehand with 100
// workers, every completion fenced (batched, then synchronous).
func BenchmarkBurnDown(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(map[bool]string{false: "batched", true: "sync"}[sync], func(b *testing.B) {
			p := benchPool(b)
			var handled atomic.Int64
			burnDown(b, p, client(b, p, &Config{
				Queues:       map[string]QueueConfig{DefaultQueue: {MaxWorkers: 100}},
				Workers:      workers(func(context.Context, *Job[testArgs]) error { handled.Add(1); return nil }),
				SyncComplete: sync,
			}), &handled)
		})
	}
}

// burnDown enqueues b.N no-op jobs through c, then starts c and reports
// how fast it works them all, from its start: until handled counts b.N
// runs and the table is empty (their completions written). It reads
// only the counter meanwhile: a count(*) of the table every millisecond
// took a core of the server's two.
func burnDown(b *testing.B, p *pgxpool.Pool, c *Client, handled *atomic.Int64) {
	ctx := b.Context()
	params := make([]EnqueueParams, b.N)
	for i := range params {
		params[i] = EnqueueParams{Args: testArgs{N: i}}
	}
	_, err := c.EnqueueMany(ctx, params)
	require.NoError(b, err)
	b.ResetTimer()
	start := time.Now()
	require.NoError(b, c.Start(ctx))
	deadline := start.Add(10 * time.Minute)
	for handled.Load() < int64(b.N) || count(b, p, `SELECT count(*) FROM (SELECT 1 FROM aegis_job LIMIT 1) j`) > 0 {
		require.True(b, time.Now().Before(deadline), "%d of %d jobs handled, or their completions unwritten, after 10 minutes", handled.Load(), b.N)
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkEnqueue inserts one job per operation from 16 goroutines.
func BenchmarkEnqueue(b *testing.B) {
	p := benchPool(b)
	c := client(b, p, nil)
	latency.Bench(b, 16, func(int) error {
		_, err := c.Enqueue(b.Context(), testArgs{N: 1}, nil)
		return err
	})
}

// BenchmarkInsertToStart is the latency from before Enqueue to the start
// of the job's handler, on an idle queue.
func BenchmarkInsertToStart(b *testing.B) {
	p := benchPool(b)
	ctx := b.Context()
	started := make(chan time.Time, 1)
	c := client(b, p, &Config{
		Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 10}},
		Workers: workers(func(context.Context, *Job[testArgs]) error { started <- time.Now(); return nil }),
	})
	require.NoError(b, c.Start(ctx))
	var rec latency.Recorder
	b.ResetTimer()
	for b.Loop() {
		at := time.Now()
		_, err := c.Enqueue(ctx, testArgs{}, nil)
		require.NoError(b, err)
		rec.Add(testenv.Recv(b, started, 20*time.Second, "the job to start").Sub(at))
	}
	rec.Report(b)
}

// BenchmarkTracing is what tracing costs the queue when its sampler
// samples nothing, against no TracerProvider: enqueues from 16 goroutines,
// and the work of jobs enqueued beforehand (claim, handler, batched
// completion) with 16 workers. One run measures off, then never; -count
// repeats each arm in a row, so make bench-tracing interleaves them by
// running the benchmark 8 times.
func BenchmarkTracing(b *testing.B) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	b.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	arms := []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", nil}, {"never", never}}
	// The arm run first meets a colder pool and table: make bench-tracing
	// runs the benchmark again with the arms the other way round.
	if os.Getenv("AEGIS_BENCH_TRACING_FIRST") == "never" {
		slices.Reverse(arms)
	}
	p := benchPool(b)
	for _, arm := range arms {
		b.Run("enqueue/"+arm.name, func(b *testing.B) {
			c := client(b, p, &Config{TracerProvider: arm.tp, AllowUnknownKinds: true})
			latency.Bench(b, 16, func(int) error {
				_, err := c.Enqueue(b.Context(), testArgs{N: 1}, nil)
				return err
			})
			_, err := p.Exec(b.Context(), `DELETE FROM aegis_job`)
			require.NoError(b, err)
		})
	}
	for _, arm := range arms {
		b.Run("work/"+arm.name, func(b *testing.B) {
			var handled atomic.Int64
			c := client(b, p, &Config{
				Queues:         map[string]QueueConfig{DefaultQueue: {MaxWorkers: 16}},
				Workers:        workers(func(context.Context, *Job[testArgs]) error { handled.Add(1); return nil }),
				TracerProvider: arm.tp,
			})
			burnDown(b, p, c, &handled)
			b.StopTimer()
			stop(b, c)
		})
	}
}

// BenchmarkClaim times one claim of 50 jobs (the claim statement alone,
// as the client sends it and scans its rows) from a table of 300,000
// available jobs, with the claim's scan as it is (PL/pgSQL, migration 5)
// and as it was (the SQL function of migration 2, whose body is planned
// at every call). The claimed jobs stay running: b.N is bounded by the
// table (6,000 claims).
func BenchmarkClaim(b *testing.B) {
	for _, arm := range []struct{ name, lang, body string }{
		{"plpgsql", "", ""},
		{"sql-function", "sql", `SELECT id FROM aegis_job
	WHERE state = 'available' AND queue = q
	  AND NOT EXISTS (SELECT 1 FROM aegis_queue WHERE name = q AND paused)
	ORDER BY priority, run_at, id
	LIMIT n
	FOR UPDATE SKIP LOCKED`},
	} {
		b.Run(arm.name, func(b *testing.B) {
			ctx := b.Context()
			p := benchPool(b)
			c := client(b, p, &Config{AllowUnknownKinds: true})
			_, err := p.Exec(ctx, `INSERT INTO aegis_job (queue, kind, args, max_attempts)
				SELECT 'default', 'noop', jsonb_build_object('n', g), 25 FROM generate_series(1, 300000) g`)
			require.NoError(b, err)
			_, err = p.Exec(ctx, `VACUUM ANALYZE aegis_job`)
			require.NoError(b, err)
			if arm.lang != "" {
				_, err = p.Exec(ctx, `CREATE OR REPLACE FUNCTION aegis_job_next(q text, n integer) RETURNS SETOF bigint
LANGUAGE `+arm.lang+` VOLATILE
SET enable_sort = off SET enable_bitmapscan = off SET enable_seqscan = off
AS $$ `+arm.body+` $$`)
				require.NoError(b, err)
			}
			require.LessOrEqual(b, b.N, 6000, "300,000 jobs are 6,000 claims of 50")
			b.ResetTimer()
			for range b.N {
				jobs, err := c.sql.claim(ctx, p, DefaultQueue, 50, "bench")
				require.NoError(b, err)
				require.Len(b, jobs, 50)
			}
		})
	}
}
