package queuebench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestRealistic runs the realistic workload briefly on aegis and on the
// bare protocol: jobs are enqueued, worked and timed from their enqueue.
func TestRealistic(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	o := RealisticOptions{Depth: 200, Warmup: 200 * time.Millisecond, Duration: time.Second}
	for name, run := range map[string]func(context.Context) (RealisticResult, error){
		"aegis": func(ctx context.Context) (RealisticResult, error) { return RealisticAegis(ctx, url, 20, o) },
		"bare": func(ctx context.Context) (RealisticResult, error) {
			return RealisticBare(ctx, url, BareOptions{Claimers: 2, Batch: 10}, o)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := run(t.Context())
			require.NoError(t, err)
			require.Positive(t, res.JobsPerSec)
			require.Positive(t, res.Started)
			// Every job waits 1 ms after its start; its enqueue came
			// before its insert, which came before its claim.
			require.Positive(t, res.P50)
			require.LessOrEqual(t, res.P50, res.P99)
			require.Less(t, res.P99, time.Minute, "a latency from a zero enqueue time is decades")
		})
	}
}
