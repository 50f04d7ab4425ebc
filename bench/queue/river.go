package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/aegislab/aegis/internal/testing/queuebench"
)

// riverNoop is River's no-op job.
type riverNoop struct {
	N  int   `json:"n"`
	At int64 `json:"at,omitempty"` // queuebench.Noop.At
}

func (riverNoop) Kind() string { return "noop" }

type riverWorker struct {
	river.WorkerDefaults[riverNoop]
	handled   *atomic.Int64
	started   chan time.Time
	realistic *queuebench.Realistic
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[riverNoop]) error {
	if w.realistic != nil {
		w.realistic.Job(job.Args.At)
		return nil
	}
	if w.started != nil {
		w.started <- time.Now()
	}
	w.handled.Add(1)
	return nil
}

// openRiver creates a schema with River's tables and a started client with
// workers workers and the given fetch cooldown (0: River's default).
func openRiver(ctx context.Context, url string, workers int, cooldown time.Duration, w *riverWorker) (*pgxpool.Pool, *river.Client[pgx.Tx], func(), error) {
	cfg, drop, err := queuebench.Schema(ctx, url, "river_bench")
	if err != nil {
		return nil, nil, nil, err
	}
	schema := cfg.ConnConfig.RuntimeParams["search_path"]
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, nil, err
	}
	closeFn := func() { pool.Close(); drop() }
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	c, err := river.NewClient(driver, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:       ws,
		FetchCooldown: cooldown,
		Schema:        schema,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	return pool, c, closeFn, nil
}

// riverLeft tells whether River has jobs not yet completed.
const riverLeft = `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending'))`

// burnRiver is queuebench.BurnDown for River: insert jobs no-op jobs
// (InsertManyFast), then time until every one is completed.
func burnRiver(ctx context.Context, url string, jobs, workers int, cooldown, limit time.Duration) (queuebench.Result, error) {
	var handled atomic.Int64
	pool, c, closeFn, err := openRiver(ctx, url, workers, cooldown, &riverWorker{handled: &handled})
	if err != nil {
		return queuebench.Result{}, err
	}
	defer closeFn()
	params := make([]river.InsertManyParams, jobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverNoop{N: i}}
	}
	start := time.Now()
	if _, err := c.InsertManyFast(ctx, params); err != nil {
		return queuebench.Result{}, err
	}
	insert := time.Since(start)
	cpu := queuebench.StartCPU(ctx, pool)
	cost := queuebench.StartCost(ctx, pool)
	start = time.Now()
	if err := c.Start(ctx); err != nil {
		return queuebench.Result{}, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }() // a second Stop is a no-op
	rate, perSecond, polls, err := queuebench.Drain(ctx, pool, start, &handled, int64(jobs), riverLeft, limit)
	if err != nil {
		return queuebench.Result{}, err
	}
	// Stopped before the cost is read: Cost flushes idle connections.
	if err := c.Stop(ctx); err != nil {
		return queuebench.Result{}, err
	}
	perJob, err := cost.Stop(ctx, int(handled.Load()), polls)
	if err != nil {
		return queuebench.Result{}, err
	}
	clientCPU, serverCPU := cpu.Stop(ctx, int(handled.Load()))
	return queuebench.Result{
		Cost:         perJob,
		ClientCPU:    clientCPU,
		ServerCPU:    serverCPU,
		Jobs:         jobs,
		Workers:      workers,
		JobsPerSec:   float64(int64(rate*10+0.5)) / 10,
		InsertPerSec: float64(int64(float64(jobs)/insert.Seconds()*10+0.5)) / 10,
		PerSecond:    perSecond,
	}, nil
}

// latencyRiver is queuebench.Latency for River.
func latencyRiver(ctx context.Context, url string, samples int, gap, cooldown time.Duration) ([]time.Duration, error) {
	var handled atomic.Int64
	started := make(chan time.Time, 1)
	_, c, closeFn, err := openRiver(ctx, url, 10, cooldown, &riverWorker{handled: &handled, started: started})
	if err != nil {
		return nil, err
	}
	defer closeFn()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	return queuebench.Sample(ctx, samples, gap, started, func(i int) error {
		_, err := c.Insert(ctx, riverNoop{N: i}, nil)
		return err
	})
}

// realisticRiver is queuebench.RealisticAegis for River with workers
// workers and a 1 ms fetch cooldown.
func realisticRiver(ctx context.Context, url string, workers int, o queuebench.RealisticOptions) (queuebench.RealisticResult, error) {
	r := queuebench.NewRealistic(o)
	_, c, closeFn, err := openRiver(ctx, url, workers, time.Millisecond, &riverWorker{handled: &atomic.Int64{}, realistic: r})
	if err != nil {
		return queuebench.RealisticResult{}, err
	}
	defer closeFn()
	if err := c.Start(ctx); err != nil {
		return queuebench.RealisticResult{}, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	return r.Run(ctx, func(ctx context.Context) error {
		jobs := r.Jobs(r.Options().Batch)
		params := make([]river.InsertManyParams, len(jobs))
		for i, j := range jobs {
			params[i] = river.InsertManyParams{Args: riverNoop{N: j.N, At: j.At}}
		}
		_, err := c.InsertManyFast(ctx, params)
		return err
	})
}
