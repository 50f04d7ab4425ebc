package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchLeaseJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "bench", "lease", "--backend", "memory", "--goroutines", "2", "--duration", "50ms", "--json")
	require.Equal(t, 0, code, stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), "stdout is one JSON object: %s", stdout)
	require.Equal(t, "memory", got["backend"])
	require.EqualValues(t, 2, got["goroutines"])
	require.Positive(t, got["ops_per_sec"])
	require.Contains(t, got, "p50_us")
	require.Contains(t, got, "p99_us")
	require.Len(t, got, 5)
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "missing subject: lease"},
		{[]string{"bench", "nope"}, `unknown subject "nope"`},
		{[]string{"bench", "lease"}, "--backend is required"},
		{[]string{"bench", "lease", "--backend", "nope"}, `unknown backend "nope"`},
		{[]string{"bench", "lease", "--backend", "memory", "--goroutines", "0"}, "--goroutines 0: must be at least 1"},
		{[]string{"bench", "lease", "--backend", "memory", "--duration", "-1s"}, "--duration -1s: must be positive"},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, tt.args...)
		require.Equal(t, 2, code, "%v", tt.args)
		require.Contains(t, stderr, tt.want, "%v", tt.args)
	}
}
