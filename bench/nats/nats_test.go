package natsbench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	natsbench "github.com/aegislab/aegis/bench/nats"
	redisbench "github.com/aegislab/aegis/bench/redis"
	"github.com/aegislab/aegis/internal/testing/latency"
)

// Every subject against the shared cluster, once: two goroutines' keys
// taken and released, then a few handoffs of one key between three
// goroutines, so that the comparison cannot rot.
func TestSubjectsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, s := range natsbench.Subjects() {
		t.Run(s.ID, func(t *testing.T) {
			op, closeFn, err := s.New()
			require.NoError(t, err)
			defer closeFn()
			for g := range 2 {
				require.NoError(t, op(ctx, g), "goroutine %d's acquire+release", g)
				require.NoError(t, op(ctx, g), "goroutine %d's acquire+release of its key again", g)
			}
			acquire, closeHandoff, err := s.Handoff("handoff/" + natsbench.Run())
			require.NoError(t, err)
			defer closeHandoff()
			var rec latency.Recorder
			n, err := redisbench.Handoff(ctx, acquire, 3, 5, time.Millisecond, &rec)
			require.NoError(t, err)
			require.Equal(t, 5, n, "five handoffs between three goroutines")
		})
	}
}

// BenchmarkAcquireRelease: one acquire and one release of a free key per
// operation, each goroutine on a key of its own.
//
//	cd bench && go test -run '^$' -bench . ./nats
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 16} {
		for _, s := range natsbench.Subjects() {
			b.Run(fmt.Sprintf("goroutines=%d/%s", n, s.ID), func(b *testing.B) {
				op, closeFn, err := s.New()
				if err != nil {
					b.Fatal(err)
				}
				defer closeFn()
				latency.Bench(b, n, func(g int) error { return op(ctx, g) })
			})
		}
	}
}
