// Package measure records operation latencies and reports throughput and
// percentiles, for `aegis bench` and the benchmarks. It does not import
// package testing, so the aegis binary can link it (package latency adds
// the benchmark reporting on top).
package measure

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Recorder collects latencies from many goroutines. The zero value is ready.
type Recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one latency.
func (r *Recorder) Add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

// Time runs fn and records how long it took.
func (r *Recorder) Time(fn func() error) error {
	start := time.Now()
	err := fn()
	r.Add(time.Since(start))
	return err
}

// Count is the number of latencies recorded.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.d)
}

// Percentile returns the p-th percentile (0 < p <= 100) by the nearest-rank
// method, or 0 when nothing was recorded.
func (r *Recorder) Percentile(p float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.d) == 0 {
		return 0
	}
	slices.Sort(r.d)
	i := int(float64(len(r.d))*p/100+0.5) - 1
	return r.d[min(max(i, 0), len(r.d)-1)]
}

// Grow makes room for n more latencies, so that recording them does not
// allocate.
func (r *Recorder) Grow(n int) {
	r.mu.Lock()
	r.d = slices.Grow(r.d, n)
	r.mu.Unlock()
}

// Result is what Run measured.
type Result struct {
	Ops       int
	OpsPerSec float64
	P50, P99  time.Duration
}

// Run calls op from the given number of goroutines until d has passed or
// ctx ends, and returns the throughput and the latency percentiles. It stops
// at the first error and returns it.
func Run(ctx context.Context, goroutines int, d time.Duration, op func(g int) error) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		rec   Recorder
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := rec.Time(func() error { return op(g) }); err != nil {
					// A context error after the run's end is the end itself
					// (an interrupted caller); any other error is reported,
					// even from a call that outlasted the run.
					if ctx.Err() == nil || !(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
						once.Do(func() { first = err; cancel() })
					}
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return Result{}, first
	}
	return Result{
		Ops:       rec.Count(),
		OpsPerSec: float64(rec.Count()) / elapsed.Seconds(),
		P50:       rec.Percentile(50),
		P99:       rec.Percentile(99),
	}, nil
}

// For calls op from the given number of goroutines until d has passed,
// recording each call's latency in rec, and returns the calls made and
// the time they took. Unlike Run it never cuts a call short (a lock
// acquired is released), so the bench commands that interleave rounds of
// several subjects use it. Each goroutine makes one call at least. It
// stops at the first error.
func For(ctx context.Context, goroutines int, d time.Duration, op func(ctx context.Context, g int) error, rec *Recorder) (int, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ops   int
		once  sync.Once
		first error
	)
	start := time.Now()
	end := start.Add(d)
	for g := range goroutines {
		wg.Go(func() {
			n := 0
			defer func() { mu.Lock(); ops += n; mu.Unlock() }()
			// Every goroutine makes one call at least: on a loaded
			// machine one may start after d has passed.
			for called := false; ctx.Err() == nil && (!called || time.Now().Before(end)); called = true {
				if err := rec.Time(func() error { return op(ctx, g) }); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				n++
			}
		})
	}
	wg.Wait()
	return ops, time.Since(start), first
}
