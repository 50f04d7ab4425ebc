package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/tool/testenv"
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
		{[]string{"bench"}, "missing subject: lease, queue"},
		{[]string{"bench", "nope"}, `unknown subject "nope"`},
		{[]string{"bench", "lease"}, "--backend is required"},
		{[]string{"bench", "lease", "--backend", "nope"}, `unknown backend "nope"`},
		{[]string{"bench", "lease", "--backend", "memory", "--goroutines", "0"}, "--goroutines 0: must be at least 1"},
		{[]string{"bench", "lease", "--backend", "memory", "--duration", "-1s"}, "--duration -1s: must be positive"},
		{[]string{"bench", "queue", "--jobs", "0"}, "--jobs 0: must be between 1 and 10000000"},
		{[]string{"bench", "queue", "--workers", "-3"}, "--workers -3: must be between 1 and 10000"},
		{[]string{"bench", "queue", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, tt.args...)
		require.Equal(t, 2, code, "%v", tt.args)
		require.Contains(t, stderr, tt.want, "%v", tt.args)
	}
}

func TestBenchQueueJSON(t *testing.T) {
	t.Parallel()
	testenv.PostgresURL(t) // fail clearly when the test server is missing
	code, stdout, stderr := run(t, "bench", "queue", "--jobs", "300", "--workers", "8", "--json")
	require.Equal(t, 0, code, stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), "stdout is one JSON object: %s", stdout)
	require.EqualValues(t, 300, got["jobs"])
	require.EqualValues(t, 8, got["workers"])
	require.Positive(t, got["jobs_per_sec"])
	require.Positive(t, got["insert_per_sec"])
	require.Len(t, got, 4)

	code, stdout, stderr = run(t, "bench", "queue", "--jobs", "50", "--workers", "2", "--sync")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "50 no-op jobs, 2 workers: ")
}
