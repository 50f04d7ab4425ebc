package redisbench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	redisbench "github.com/aegislab/aegis/bench/redis"
	"github.com/aegislab/aegis/internal/testing/latency"
)

func env(b *testing.B) *redisbench.Env {
	s, err := redisbench.ServersFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	e := redisbench.NewEnv(s)
	b.Cleanup(e.Close)
	return e
}

// BenchmarkAcquireRelease: one acquire and one release of a free key per
// operation, each goroutine on a key of its own.
//
//	cd bench && go test -run '^$' -bench AcquireRelease ./redis
func BenchmarkAcquireRelease(b *testing.B) {
	e := env(b)
	ctx := context.Background()
	for _, n := range []int{1, 16} {
		for _, s := range e.Subjects() {
			b.Run(fmt.Sprintf("goroutines=%d/%s", n, s.ID), func(b *testing.B) {
				op, err := s.New(n)
				if err != nil {
					b.Fatal(err)
				}
				latency.Bench(b, n, func(g int) error { return op(ctx, g) })
			})
		}
	}
}

// BenchmarkHandoff: 8 goroutines contend for one key; each operation is
// one handoff, measured from the start of the holder's release to the
// return of the next holder's acquire. Holders work for Hold (±50%).
//
//	cd bench && go test -run '^$' -bench Handoff -benchtime 200x ./redis
func BenchmarkHandoff(b *testing.B) {
	e := env(b)
	for i, c := range e.Contenders() {
		b.Run(c.ID, func(b *testing.B) {
			acquire, err := c.New(e.Key(fmt.Sprint("handoff-", i, "-", b.N)))
			if err != nil {
				b.Fatal(err)
			}
			var rec latency.Recorder
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.ResetTimer()
			start := time.Now()
			n, err := redisbench.Handoff(ctx, acquire, 8, b.N, redisbench.Hold, &rec)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "handoffs/s")
			rec.Report(b)
		})
	}
}
