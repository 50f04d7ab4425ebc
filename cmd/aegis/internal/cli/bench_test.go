package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
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

// TestBenchLeaseTracingJSON: --tracing runs the three arms and reports
// each, off first.
func TestBenchLeaseTracingJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "bench", "lease", "--backend", "memory", "--goroutines", "2", "--tracing", "--rounds", "2", "--round", "20ms", "--json")
	require.Equal(t, 0, code, stderr)
	var got struct {
		Backend    string `json:"backend"`
		Goroutines int    `json:"goroutines"`
		Rounds     int    `json:"rounds"`
		RoundMS    int    `json:"round_ms"`
		LoadStart  string `json:"loadavg_start"`
		Arms       []struct {
			Arm       string  `json:"arm"`
			Ops       int     `json:"ops"`
			OpsPerSec float64 `json:"ops_per_sec"`
			P50us     float64 `json:"p50_us"`
			Ratio     float64 `json:"ops_ratio_to_off"`
		} `json:"arms"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), "stdout is one JSON object: %s", stdout)
	require.Equal(t, "memory", got.Backend)
	require.Equal(t, 2, got.Goroutines)
	require.Equal(t, 2, got.Rounds)
	require.Equal(t, 20, got.RoundMS)
	require.NotEmpty(t, got.LoadStart)
	require.Len(t, got.Arms, 3)
	for i, want := range []string{"off", "never", "always"} {
		a := got.Arms[i]
		require.Equal(t, want, a.Arm)
		require.GreaterOrEqual(t, a.Ops, 2*2, "%s: each goroutine makes one call a round at least", want)
		require.Positive(t, a.OpsPerSec, want)
		require.Positive(t, a.Ratio, want)
	}
	require.EqualValues(t, 1, got.Arms[0].Ratio)

	code, stdout, stderr = run(t, "bench", "lease", "--backend", "memory", "--goroutines", "2", "--tracing", "--rounds", "1", "--round", "10ms")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "| arm | acquire+release/s | p50 µs | p99 µs | client CPU µs/op | ratio to off |")
	require.Contains(t, stdout, "| off: the Locker as it is")
	require.Contains(t, stdout, "| always: traced, every span sampled")
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
		{[]string{"bench", "lease", "--backend", "memory", "--tracing", "--rounds", "0"}, "--rounds 0: must be at least 1"},
		{[]string{"bench", "lease", "--backend", "memory", "--tracing", "--round", "0s"}, "--round 0s: must be positive"},
		{[]string{"bench", "queue", "--jobs", "0"}, "--jobs 0: must be between 1 and 10000000"},
		{[]string{"bench", "queue", "--workers", "-3"}, "--workers -3: must be between 1 and 10000"},
		{[]string{"bench", "queue", "extra"}, `unexpected argument "extra"`},
		{[]string{"bench", "queue", "--rounds", "0"}, "--rounds 0: must be between 1 and 100"},
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
	// The contract: one aegis run, one object of four keys.
	code, stdout, stderr := run(t, "bench", "queue", "--jobs", "300", "--workers", "8", "--json")
	require.Equal(t, 0, code, stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), "stdout is one JSON object: %s", stdout)
	require.EqualValues(t, 300, got["jobs"])
	require.EqualValues(t, 8, got["workers"])
	require.Positive(t, got["jobs_per_sec"])
	require.Positive(t, got["insert_per_sec"])
	require.Len(t, got, 4)

	code, _, stderr = run(t, "bench", "queue", "--jobs", "300", "--rounds", "2", "--json")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--rounds with --json")

	code, stdout, stderr = run(t, "bench", "queue", "--jobs", "50", "--workers", "2", "--rounds", "1", "--sync")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "round 1  aegis, 2 workers, every completion fenced")
	require.Contains(t, stdout, "round 1  bare protocol, 2 claimers × 500")
	require.Contains(t, stdout, "per job: ")
	require.Contains(t, stdout, "50 no-op jobs, 1 rounds: aegis / bare protocol = ")
}
