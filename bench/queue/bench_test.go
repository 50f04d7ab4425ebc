package main

import (
	"context"
	"testing"
	"time"

	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/queuebench"
)

// BenchmarkBurnDown works b.N no-op jobs with 100 workers: aegis (every
// completion fenced) and River with its default and a 1 ms fetch cooldown,
// on the same server. The main program (make bench-queue) runs the
// 50,000-job comparison and prints the ratios.
func BenchmarkBurnDown(b *testing.B) {
	url := backend.FromEnv().PostgresURL
	for _, s := range []struct {
		name string
		run  func(ctx context.Context, jobs int) (queuebench.Result, error)
	}{
		{"aegis", func(ctx context.Context, jobs int) (queuebench.Result, error) {
			return queuebench.BurnDown(ctx, url, jobs, 100, queuebench.Options{})
		}},
		{"river-default", func(ctx context.Context, jobs int) (queuebench.Result, error) {
			return burnRiver(ctx, url, jobs, 100, 0, 0)
		}},
		{"river-1ms", func(ctx context.Context, jobs int) (queuebench.Result, error) {
			return burnRiver(ctx, url, jobs, 100, time.Millisecond, 0)
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			res, err := s.run(b.Context(), b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.JobsPerSec, "jobs/s")
		})
	}
}
