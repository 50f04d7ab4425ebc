// Package queuebench measures the queue package against a real PostgreSQL
// for `aegis bench queue` and the comparisons of the bench module: the
// burn-down of a backlog of no-op jobs, the insert-to-start latency on an
// idle queue, and a steady run that enqueues and works at once. Each run
// uses a schema of its own, dropped at the end.
package queuebench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/queue"
)

// PoolSize is the connection pool of every benchmarked client (aegis and
// its peers alike).
const PoolSize = 16

// Schema creates a schema of its own on the server at url and returns a
// pool config whose connections use it, and a function that drops it.
func Schema(ctx context.Context, url, prefix string) (*pgxpool.Config, func(), error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, backend.PostgresError("open", url, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := prefix + "_" + hex.EncodeToString(b[:])
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, nil, backend.PostgresError("connect to", url, err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return nil, nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE")
			_ = conn.Close(ctx)
		}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = schema // to find the run's server processes
	cfg.MaxConns = PoolSize
	cfg.MinConns = 4
	return cfg, drop, nil
}

// Noop is the benchmark's job.
type Noop struct {
	N int `json:"n"`
	// At is when the job was enqueued (Unix nanoseconds, taken before
	// its insert was sent), for the realistic workload; 0 otherwise.
	At int64 `json:"at,omitempty"`
}

// Kind is "noop".
func (Noop) Kind() string { return "noop" }

// Result is one burn-down.
type Result struct {
	Jobs         int     `json:"jobs"`
	Workers      int     `json:"workers"`
	JobsPerSec   float64 `json:"jobs_per_sec"`
	InsertPerSec float64 `json:"insert_per_sec"`
	// PerSecond is the jobs handled in each second of the burn-down (the
	// last entry a part of a second); not in the JSON of aegis bench.
	PerSecond []float64 `json:"-"`
	// ClientCPU and ServerCPU are the CPU time per job of this process and
	// of the run's PostgreSQL backends while the jobs were worked (not
	// inserted): a measure the machine's other load changes less than
	// jobs/s. Zero when unknown.
	ClientCPU, ServerCPU time.Duration `json:"-"`
	// Cost is what the jobs cost the server while they were worked (not
	// inserted); UnknownCost when not measured.
	Cost PerJob `json:"cost"`
	// Claims is how many claim statements the aegis client ran while it
	// worked the jobs, and ClaimBusy the time they took, summed, over the
	// run's time (above 1 when two claims were in flight at once): how
	// close its claim loops were to the run's bound. Zero for the others.
	Claims    int     `json:"-"`
	ClaimBusy float64 `json:"-"`
}

// CPU measures the CPU time of this process and of the PostgreSQL
// backends of one pool (found by its application_name; the server runs on
// this machine) between Start and Stop.
type CPU struct {
	pool         *pgxpool.Pool
	self, server time.Duration
}

// StartCPU begins a measure.
func StartCPU(ctx context.Context, pool *pgxpool.Pool) *CPU {
	c := &CPU{pool: pool}
	c.self, c.server = selfCPU(), backendsCPU(ctx, pool)
	return c
}

// Stop returns the CPU time used since StartCPU, per job.
func (c *CPU) Stop(ctx context.Context, jobs int) (client, server time.Duration) {
	if jobs <= 0 {
		return 0, 0
	}
	return (selfCPU() - c.self) / time.Duration(jobs), (backendsCPU(ctx, c.pool) - c.server) / time.Duration(jobs)
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendsCPU is the CPU time of the pool's backends, from /proc (0 when
// the server is not on this machine).
func backendsCPU(ctx context.Context, pool *pgxpool.Pool) time.Duration {
	var ticks uint64
	for _, t := range BackendTicks(ctx, pool, pool.Config().ConnConfig.RuntimeParams["application_name"]) {
		ticks += t
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ = 100
}

// Querier is a pgx pool or connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// BackendTicks returns the CPU time (user + system, in USER_HZ ticks of
// 10 ms) of each PostgreSQL backend whose application_name is app, by pid,
// from /proc: empty when the server is not on this machine or cannot be
// asked.
func BackendTicks(ctx context.Context, q Querier, app string) map[int32]uint64 {
	out := map[int32]uint64{}
	rows, err := q.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return out
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return out
	}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		out[pid] = ut + st
	}
	return out
}

// Drain waits until handled reaches jobs (counted in-process, cheaply),
// then polls the database with left (a query that tells whether jobs are
// left uncompleted) every millisecond until it says none. It returns the
// jobs per second since start (jobs over the time to drain), the jobs
// handled in each second and how many polls it ran (for Cost.Stop). When limit is positive and passes first, it
// stops there and the rate is the jobs handled over limit (a backlog too
// deep to drain in the time). Peers are measured the same way.
func Drain(ctx context.Context, pool *pgxpool.Pool, start time.Time, handled *atomic.Int64, jobs int64, left string, limit time.Duration) (rate float64, perSecond []float64, polls int64, err error) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var last int64
	next := start.Add(time.Second)
	sample := func(now time.Time) {
		for !now.Before(next) {
			h := handled.Load()
			perSecond = append(perSecond, float64(h-last))
			last = h
			next = next.Add(time.Second)
		}
	}
	for handled.Load() < jobs {
		select {
		case now := <-tick.C:
			sample(now)
			if limit > 0 && now.Sub(start) >= limit {
				return float64(handled.Load()) / now.Sub(start).Seconds(), perSecond, 0, nil
			}
		case <-ctx.Done():
			return 0, nil, 0, ctx.Err()
		}
	}
	for {
		var more bool
		polls++
		if err := pool.QueryRow(ctx, left).Scan(&more); err != nil {
			return 0, nil, polls, err
		}
		if !more {
			d := time.Since(start)
			perSecond = append(perSecond, float64(handled.Load()-last))
			return float64(jobs) / d.Seconds(), perSecond, polls, nil
		}
		select {
		case now := <-tick.C:
			sample(now)
		case <-ctx.Done():
			return 0, nil, polls, ctx.Err()
		}
	}
}

// Options tune a burn-down.
type Options struct {
	// SyncComplete completes each job in its own statement.
	SyncComplete bool
	// ClaimAhead is queue.QueueConfig.ClaimAhead.
	ClaimAhead int
	// For, when positive, ends the run after this long (see Drain).
	For time.Duration
}

// BurnDown inserts jobs no-op jobs with one COPY, then starts a client
// with workers workers and times until every job's fenced completion is
// written (no job is left in the hot table).
func BurnDown(ctx context.Context, url string, jobs, workers int, o Options) (Result, error) {
	pool, closeFn, err := open(ctx, url)
	if err != nil {
		return Result{}, err
	}
	defer closeFn()

	var handled atomic.Int64
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[Noop](func(context.Context, *queue.Job[Noop]) error {
		handled.Add(1)
		return nil
	}))
	metrics := prometheus.NewRegistry()
	c, err := queue.New(pool, &queue.Config{
		Queues:       map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: workers, ClaimAhead: o.ClaimAhead}},
		Workers:      ws,
		SyncComplete: o.SyncComplete,
		Logger:       slog.New(slog.DiscardHandler),
		Registerer:   metrics,
	})
	if err != nil {
		return Result{}, err
	}

	params := make([]queue.EnqueueParams, jobs)
	for i := range params {
		params[i] = queue.EnqueueParams{Args: Noop{N: i}}
	}
	start := time.Now()
	if _, err := c.EnqueueMany(ctx, params); err != nil {
		return Result{}, err
	}
	insert := time.Since(start)

	cpu := StartCPU(ctx, pool)
	cost := StartCost(ctx, pool)
	start = time.Now()
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }() // a second Stop is a no-op
	rate, perSecond, polls, err := Drain(ctx, pool, start, &handled, int64(jobs), `SELECT EXISTS (SELECT 1 FROM aegis_job)`, o.For)
	if err != nil {
		return Result{}, err
	}
	// Stopped before the cost is read: Cost flushes idle connections.
	if err := c.Stop(ctx); err != nil {
		return Result{}, err
	}
	perJob, err := cost.Stop(ctx, int(handled.Load()), polls)
	if err != nil {
		return Result{}, err
	}
	clientCPU, serverCPU := cpu.Stop(ctx, int(handled.Load()))
	claims, claimTime := claimStats(metrics)
	return Result{
		Claims:       claims,
		ClaimBusy:    claimTime.Seconds() / (float64(handled.Load()) / rate),
		Cost:         perJob,
		ClientCPU:    clientCPU,
		ServerCPU:    serverCPU,
		Jobs:         jobs,
		Workers:      workers,
		JobsPerSec:   round1(rate),
		InsertPerSec: round1(float64(jobs) / insert.Seconds()),
		PerSecond:    perSecond,
	}, nil
}

// claimStats reads the claim statements' count and summed time from the
// client's aegis_queue_claim_seconds.
func claimStats(g prometheus.Gatherer) (int, time.Duration) {
	families, _ := g.Gather()
	for _, f := range families {
		if f.GetName() != "aegis_queue_claim_seconds" {
			continue
		}
		var n uint64
		var sum float64
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
		return int(n), time.Duration(sum * float64(time.Second))
	}
	return 0, 0
}

// open creates a schema, a pool on it and the queue's tables; close drops
// them.
func open(ctx context.Context, url string) (pool *pgxpool.Pool, closeFn func(), err error) {
	cfg, drop, err := Schema(ctx, url, "aegis_bench_queue")
	if err != nil {
		return nil, nil, err
	}
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	closeFn = func() { pool.Close(); drop() }
	if err := queue.Migrate(ctx, pool); err != nil {
		closeFn()
		return nil, nil, err
	}
	return pool, closeFn, nil
}

// Latency enqueues samples jobs one at a time on an idle queue (each
// after the previous one ran and gap passed) and returns each one's
// insert-to-start latency: from before Enqueue to its handler's start.
func Latency(ctx context.Context, url string, samples int, gap time.Duration) ([]time.Duration, error) {
	pool, closeFn, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	started := make(chan time.Time, 1)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[Noop](func(context.Context, *queue.Job[Noop]) error {
		started <- time.Now()
		return nil
	}))
	c, err := queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 10}},
		Workers: ws,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	return Sample(ctx, samples, gap, started, func(i int) error {
		_, err := c.Enqueue(ctx, Noop{N: i}, nil)
		return err
	})
}

// Sample runs enqueue samples times, each time waiting for the handler's
// start time on started and then for gap, and returns the latencies.
func Sample(ctx context.Context, samples int, gap time.Duration, started <-chan time.Time, enqueue func(i int) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, samples)
	for i := range samples {
		select {
		case <-time.After(gap):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		at := time.Now()
		if err := enqueue(i); err != nil {
			return nil, err
		}
		select {
		case s := <-started:
			out = append(out, s.Sub(at))
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("sample %d did not start within 30s", i)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// SteadyOptions configure a steady run.
type SteadyOptions struct {
	Workers   int           // the client's workers
	Duration  time.Duration // how long to run
	Window    time.Duration // throughput is reported per window
	Enqueuers int           // goroutines enqueueing
	Batch     int           // jobs per EnqueueMany
	Backlog   int           // enqueuers wait while more jobs than this are not yet worked
	// Rate is the offered load in jobs/s, shared by the enqueuers; 0 means
	// as fast as the backlog allows (the queue's capacity).
	Rate float64
	// Progress, if set, is called after each window with its throughput
	// and the run's application_name (its schema), which names the run's
	// server processes in pg_stat_activity.
	Progress func(window int, jobsPerSec float64, backlog int64, app string)
	// Logger receives the client's logs (default: none).
	Logger *slog.Logger
}

// SteadyResult is a steady run: the throughput of each window, in jobs/s.
type SteadyResult struct {
	Windows  []float64
	Inserted int64
	Worked   int64
}

// Steady enqueues and works at once for o.Duration: o.Enqueuers goroutines
// insert batches of o.Batch no-op jobs (waiting while the backlog is above
// o.Backlog) while a client with o.Workers workers runs them; it reports
// the jobs worked per window.
func Steady(ctx context.Context, url string, o SteadyOptions) (SteadyResult, error) {
	pool, closeFn, err := open(ctx, url)
	if err != nil {
		return SteadyResult{}, err
	}
	defer closeFn()
	s := &steady{o: o}
	c, err := s.client(pool)
	if err != nil {
		return SteadyResult{}, err
	}
	params := make([]queue.EnqueueParams, o.Batch)
	for i := range params {
		params[i] = queue.EnqueueParams{Args: Noop{N: i}}
	}
	s.insert = func(ctx context.Context) error {
		_, err := c.EnqueueMany(ctx, params)
		return err
	}
	s.backlog = func() int64 { return s.inserted.Load() - s.handled.Load() }
	app := pool.Config().ConnConfig.RuntimeParams["application_name"]
	if err := c.Start(ctx); err != nil {
		return SteadyResult{}, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()

	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	s.start = time.Now()
	errs := make(chan error, o.Enqueuers)
	var wg sync.WaitGroup
	for range o.Enqueuers {
		wg.Go(func() {
			if err := s.enqueue(runCtx); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	res := s.measure(runCtx, app)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	res.Inserted, res.Worked = s.inserted.Load(), s.handled.Load()
	return res, nil
}

// steady is a Steady run (or a Realistic one's enqueuers): its options,
// its counts, its start, how it inserts a batch of o.Batch jobs and how it
// counts the backlog.
type steady struct {
	o                 SteadyOptions
	handled, inserted atomic.Int64
	start             time.Time // when the enqueuers started
	insert            func(ctx context.Context) error
	backlog           func() int64
}

// client returns a client on pool with o.Workers workers of no-op jobs
// that count what they handle.
func (s *steady) client(pool *pgxpool.Pool) (*queue.Client, error) {
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[Noop](func(context.Context, *queue.Job[Noop]) error {
		s.handled.Add(1)
		return nil
	}))
	return queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: s.o.Workers}},
		Workers: ws,
		Logger:  cmp.Or(s.o.Logger, slog.New(slog.DiscardHandler)),
	})
}

// enqueue is one enqueuer: it inserts batches of o.Batch jobs until ctx
// ends, waiting while the backlog is above o.Backlog or, with o.Rate,
// while it is ahead of the offered load. It returns an insert's error
// unless ctx had ended.
func (s *steady) enqueue(ctx context.Context) error {
	for ctx.Err() == nil {
		if s.backlog() > int64(s.o.Backlog) {
			time.Sleep(time.Millisecond)
			continue
		}
		if s.o.Rate > 0 {
			due := s.start.Add(time.Duration(float64(s.inserted.Load()) / s.o.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(min(d, 10*time.Millisecond))
				continue
			}
		}
		if err := s.insert(ctx); err != nil {
			if ctx.Err() == nil {
				return err
			}
			return nil
		}
		s.inserted.Add(int64(s.o.Batch))
	}
	return nil
}

// measure records the jobs worked per o.Window until ctx ends, reporting
// each window to o.Progress.
func (s *steady) measure(ctx context.Context, app string) SteadyResult {
	var res SteadyResult
	tick := time.NewTicker(s.o.Window)
	last := s.handled.Load()
	for n := 0; ; n++ {
		select {
		case <-tick.C:
			now := s.handled.Load()
			rate := float64(now-last) / s.o.Window.Seconds()
			last = now
			res.Windows = append(res.Windows, round1(rate))
			if s.o.Progress != nil {
				s.o.Progress(n, rate, s.inserted.Load()-now, app)
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	tick.Stop()
	return res
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
