package queuebench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegislab/aegis/queue"
)

// RealisticOptions configure the realistic workload (the shape of
// hardbyte's queue benchmark): every job waits Work (it sleeps: waiting,
// not CPU), enqueuers keep about Depth jobs available (inserted, not yet
// started), and the run is measured for Duration after Warmup.
type RealisticOptions struct {
	Depth     int           // available jobs kept standing (default 4000)
	Work      time.Duration // each job's wait (default 1 ms)
	Warmup    time.Duration // not measured (default 5 s)
	Duration  time.Duration // measured (default 20 s)
	Enqueuers int           // goroutines enqueueing (default 2)
	Batch     int           // jobs per insert (default 100)
}

func (o RealisticOptions) withDefaults() RealisticOptions {
	o.Depth = cmp.Or(o.Depth, 4000)
	o.Work = cmp.Or(o.Work, time.Millisecond)
	o.Warmup = cmp.Or(o.Warmup, 5*time.Second)
	o.Duration = cmp.Or(o.Duration, 20*time.Second)
	o.Enqueuers = cmp.Or(o.Enqueuers, 2)
	o.Batch = cmp.Or(o.Batch, 100)
	return o
}

// RealisticResult is a realistic run's measured part: the jobs finished
// per second and the enqueue-to-start latency of the jobs that started in
// it (from before the job's insert was sent to its handler's first read
// of the clock).
type RealisticResult struct {
	JobsPerSec float64       `json:"jobs_per_sec"`
	Started    int           `json:"started"`
	P50        time.Duration `json:"-"`
	P99        time.Duration `json:"-"`
}

// Realistic runs the realistic workload for one subject: the subject's
// handlers call Job, and Run feeds the subject through its insert.
type Realistic struct {
	o         RealisticOptions
	s         steady
	started   atomic.Int64
	measuring atomic.Bool
	mu        sync.Mutex
	latencies []time.Duration
}

// NewRealistic returns a run with o (zero fields: their defaults).
func NewRealistic(o RealisticOptions) *Realistic {
	o = o.withDefaults()
	r := &Realistic{o: o}
	r.s.o = SteadyOptions{Enqueuers: o.Enqueuers, Batch: o.Batch, Backlog: o.Depth}
	r.s.backlog = func() int64 { return r.s.inserted.Load() - r.started.Load() }
	return r
}

// Options returns the run's options, defaults filled in.
func (r *Realistic) Options() RealisticOptions { return r.o }

// Job is a job's handler: it reads the clock, records the latency from
// at (Noop.At) while the run is measured, waits o.Work and counts the
// job done.
func (r *Realistic) Job(at int64) {
	now := time.Now()
	r.started.Add(1)
	if r.measuring.Load() {
		r.mu.Lock()
		r.latencies = append(r.latencies, now.Sub(time.Unix(0, at)))
		r.mu.Unlock()
	}
	time.Sleep(r.o.Work)
	r.s.handled.Add(1)
}

// Jobs returns n jobs stamped with the time now, for an insert.
func (r *Realistic) Jobs(n int) []Noop {
	at := time.Now().UnixNano()
	jobs := make([]Noop, n)
	for i := range jobs {
		jobs[i] = Noop{N: i, At: at}
	}
	return jobs
}

// Run runs o.Enqueuers goroutines that call insert (which inserts
// o.Batch jobs from Jobs) while fewer than o.Depth jobs wait, for
// o.Warmup and then o.Duration, and returns the measured part. The
// subject must be working (its handlers calling Job) before Run.
func (r *Realistic) Run(ctx context.Context, insert func(ctx context.Context) error) (RealisticResult, error) {
	r.s.insert = insert
	r.s.start = time.Now()
	runCtx, cancel := context.WithTimeout(ctx, r.o.Warmup+r.o.Duration)
	defer cancel()
	errs := make(chan error, r.o.Enqueuers)
	var wg sync.WaitGroup
	for range r.o.Enqueuers {
		wg.Go(func() {
			if err := r.s.enqueue(runCtx); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	select {
	case <-time.After(r.o.Warmup):
	case <-runCtx.Done():
	}
	r.measuring.Store(true)
	h0, t0 := r.s.handled.Load(), time.Now()
	<-runCtx.Done()
	h1, d := r.s.handled.Load(), time.Since(t0)
	r.measuring.Store(false)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return RealisticResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return RealisticResult{}, err
	}
	r.mu.Lock()
	lat := slices.Clone(r.latencies)
	r.mu.Unlock()
	if len(lat) == 0 {
		return RealisticResult{}, fmt.Errorf("realistic workload: no job started in the %s measured", r.o.Duration)
	}
	slices.Sort(lat)
	at := func(p float64) time.Duration { return lat[min(int(float64(len(lat))*p/100), len(lat)-1)] }
	return RealisticResult{
		JobsPerSec: round1(float64(h1-h0) / d.Seconds()),
		Started:    len(lat),
		P50:        at(50),
		P99:        at(99),
	}, nil
}

// RealisticAegis runs the realistic workload on the aegis queue with its
// defaults and workers workers.
func RealisticAegis(ctx context.Context, url string, workers int, o RealisticOptions) (RealisticResult, error) {
	pool, closeFn, err := open(ctx, url)
	if err != nil {
		return RealisticResult{}, err
	}
	defer closeFn()
	r := NewRealistic(o)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[Noop](func(_ context.Context, j *queue.Job[Noop]) error {
		r.Job(j.Args.At)
		return nil
	}))
	c, err := queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: workers}},
		Workers: ws,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return RealisticResult{}, err
	}
	if err := c.Start(ctx); err != nil {
		return RealisticResult{}, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	return r.Run(ctx, func(ctx context.Context) error {
		jobs := r.Jobs(r.o.Batch)
		params := make([]queue.EnqueueParams, len(jobs))
		for i, j := range jobs {
			params[i] = queue.EnqueueParams{Args: j}
		}
		_, err := c.EnqueueMany(ctx, params)
		return err
	})
}

// RealisticBare runs the realistic workload on the bare protocol: o's
// claimers claim batches of o.Batch, each job of a batch on a goroutine
// of its own (claimers × batch jobs in flight at most).
func RealisticBare(ctx context.Context, url string, bo BareOptions, o RealisticOptions) (RealisticResult, error) {
	bo = bo.withDefaults()
	pool, closeFn, err := openBare(ctx, url)
	if err != nil {
		return RealisticResult{}, err
	}
	defer closeFn()
	r := NewRealistic(o)
	bo.Work = func(j Noop) { r.Job(j.At) }
	runCtx, stop := startClaimers(ctx, pool, bo, &atomic.Int64{})
	res, err := r.Run(runCtx, func(ctx context.Context) error {
		return bareInsert(ctx, pool, r.Jobs(r.o.Batch))
	})
	if cerr := stop(); cerr != nil {
		return RealisticResult{}, cerr
	}
	return res, err
}
