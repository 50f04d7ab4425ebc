// Package latency records operation latencies and reports percentiles, for
// benchmarks and `aegis bench`.
package latency

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
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

// Report adds p50 and p99 in microseconds to a benchmark's results.
func (r *Recorder) Report(b *testing.B) {
	b.ReportMetric(float64(r.Percentile(50))/1e3, "p50-µs")
	b.ReportMetric(float64(r.Percentile(99))/1e3, "p99-µs")
}

// Bench runs b.N calls of op spread over the given number of goroutines,
// records each call's latency, and reports ops/s, p50 and p99. op gets the
// index of its goroutine, so each can use keys of its own.
func Bench(b *testing.B, goroutines int, op func(g int) error) {
	var (
		rec  Recorder
		left atomic.Int64
		wg   sync.WaitGroup
	)
	rec.d = make([]time.Duration, 0, b.N)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := rec.Time(func() error { return op(g) }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	rec.Report(b)
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
