package latency

import (
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
