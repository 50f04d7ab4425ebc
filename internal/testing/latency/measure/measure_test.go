package measure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var r Recorder
	require.Zero(t, r.Percentile(50))
	for i := 100; i >= 1; i-- {
		r.Add(time.Duration(i) * time.Millisecond)
	}
	require.Equal(t, 100, r.Count())
	require.Equal(t, 50*time.Millisecond, r.Percentile(50))
	require.Equal(t, 99*time.Millisecond, r.Percentile(99))
	require.Equal(t, 100*time.Millisecond, r.Percentile(100))
	require.Equal(t, 1*time.Millisecond, r.Percentile(0.1))
}

func TestRun(t *testing.T) {
	t.Parallel()
	r, err := Run(t.Context(), 4, 50*time.Millisecond, func(int) error {
		time.Sleep(time.Millisecond)
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, r.Ops)
	require.Positive(t, r.OpsPerSec)
	require.GreaterOrEqual(t, r.P50, time.Millisecond)
	require.GreaterOrEqual(t, r.P99, r.P50)

	boom := errors.New("boom")
	_, err = Run(t.Context(), 2, time.Minute, func(int) error { return boom })
	require.ErrorIs(t, err, boom, "the first error ends the run")

	// A call that fails after the run's end still fails the run (a store
	// that takes longer than the run to refuse must not yield a result).
	_, err = Run(t.Context(), 1, time.Millisecond, func(int) error {
		time.Sleep(20 * time.Millisecond)
		return boom
	})
	require.ErrorIs(t, err, boom, "an error from a call that outlasted the run")
}

// For lets a call that outlasts the duration finish and counts it, and
// stops at the first error.
func TestFor(t *testing.T) {
	var rec Recorder
	n, took, err := For(t.Context(), 3, time.Millisecond, func(ctx context.Context, g int) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // longer than the duration: not cut short
			return nil
		}
	}, &rec)
	if err != nil || n != 3 || rec.Count() != 3 || took < 20*time.Millisecond {
		t.Fatalf("For = %d calls in %s, %v (recorded %d); want each of 3 goroutines' call finished", n, took, err, rec.Count())
	}
	boom := errors.New("boom")
	_, _, err = For(t.Context(), 2, time.Minute, func(context.Context, int) error { return boom }, &rec)
	if !errors.Is(err, boom) {
		t.Fatalf("For's error = %v, want the op's", err)
	}
}
