// Package latency reports operation latencies in benchmarks: a Recorder
// whose percentiles go into a benchmark's results, and Bench, which runs b.N
// calls over goroutines. It imports package testing, so only tests and
// benchmarks may import it; the aegis binary measures with package measure.
package latency

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aegislab/aegis/internal/testing/latency/measure"
)

// Recorder collects latencies from many goroutines (see measure.Recorder)
// and reports them to a benchmark. The zero value is ready.
type Recorder struct {
	measure.Recorder
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
	rec.Grow(b.N)
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
