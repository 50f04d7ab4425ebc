package measure

import (
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
