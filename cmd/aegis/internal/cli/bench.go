package cli

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
)

var benchCommand = command{
	name:    "bench",
	summary: "measure lease and queue throughput and latency against real servers",
	run:     runBench,
}

// benchmarks are the subjects of aegis bench.
var benchmarks = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"lease": runBenchLease,
	"queue": runBenchQueue,
}

const benchLeaseUsage = `
usage: aegis bench lease --backend B [--goroutines 16] [--duration 5s] [--tracing [--rounds 10] [--round 1s]] [--json]

Bench lease measures TryAcquire followed by Release of a free key, each
goroutine on a key of its own, against the backend's real servers (found
through the AEGIS_* variables or the flags below), and prints the
throughput and the p50 and p99 latency of one acquire+release. With --json
it prints one object:

	{"backend": "postgres", "goroutines": 16, "ops_per_sec": 9100.5, "p50_us": 1650, "p99_us": 4210}

With --tracing it measures what OpenTelemetry tracing (package tracing)
costs, in three arms on the same Locker: off (no TracerProvider: the
Locker itself), never (traced, a sampler that never samples) and always
(traced, every span sampled and exported in batches to an exporter that
discards it). The arms run in --rounds rounds of --round each, in a
rotating order, and it prints per arm the throughput, the p50 and p99
latency, the process's CPU time per operation and the throughput's ratio
to off; --duration is not used. With --json it prints one object:

	{"backend": "postgres", "goroutines": 16, "rounds": 10, "round_ms": 1000, "loadavg_start": "0.12 0.30 0.41", "loadavg_end": "…",
	 "arms": [{"arm": "off", "ops": 91005, "ops_per_sec": 9100.5, "p50_us": 1650, "p99_us": 4210, "cpu_us_per_op": 61.2, "ops_ratio_to_off": 1}, …]}
`

func subjects() string { return strings.Join(slices.Sorted(maps.Keys(benchmarks)), ", ") }

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subject: %s", subjects())
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprintf(stderr, "usage: aegis bench %s [flags]\n\nRun 'aegis bench SUBJECT -h' for a subject's flags.\n", strings.ReplaceAll(subjects(), ", ", "|"))
		return flag.ErrHelp
	}
	run, ok := benchmarks[args[0]]
	if !ok {
		return usagef("unknown subject %q (known: %s)", args[0], subjects())
	}
	return run(ctx, args[1:], stdout, stderr)
}

type leaseResult struct {
	Backend    string  `json:"backend"`
	Goroutines int     `json:"goroutines"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
}

func runBenchLease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench lease", stderr, benchLeaseUsage)
	name := fs.String("backend", "", "the `backend`: "+strings.Join(backend.Names(), ", "))
	goroutines := fs.Int("goroutines", 16, "concurrent `goroutines`")
	duration := fs.Duration("duration", 5*time.Second, "how long to measure")
	asJSON := fs.Bool("json", false, "print one JSON object")
	traced := fs.Bool("tracing", false, "compare tracing off, never sampled and always sampled, in interleaved rounds")
	rounds := fs.Int("rounds", 10, "with --tracing: `rounds` of every arm")
	round := fs.Duration("round", time.Second, "with --tracing: how long each arm runs per round")
	servers := serverFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case *name == "":
		return usagef("--backend is required (%s)", strings.Join(backend.Names(), ", "))
	case *goroutines < 1:
		return usagef("--goroutines %d: must be at least 1", *goroutines)
	case *duration <= 0:
		return usagef("--duration %s: must be positive", *duration)
	case *rounds < 1:
		return usagef("--rounds %d: must be at least 1", *rounds)
	case *round <= 0:
		return usagef("--round %s: must be positive", *round)
	case !slices.Contains(backend.Names(), *name):
		return usagef("unknown backend %q (known: %s)", *name, strings.Join(backend.Names(), ", "))
	case fs.NArg() > 0:
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	l, closeFn, err := backend.Open(ctx, *name, servers())
	if err != nil {
		return err
	}
	defer closeFn()

	var run [6]byte
	_, _ = rand.Read(run[:])
	keys := make([]string, *goroutines)
	for g := range keys {
		keys[g] = fmt.Sprintf("aegis-bench/%x/%d", run, g)
	}
	if *traced {
		return benchTracing(ctx, l, *name, keys, *rounds, *round, *asJSON, stdout)
	}
	const ttl = time.Minute
	res, err := measure.Run(ctx, *goroutines, *duration, func(g int) error {
		lease, err := l.TryAcquire(ctx, keys[g], ttl)
		if err != nil {
			return err
		}
		return l.Release(ctx, lease)
	})
	if err != nil {
		return err
	}
	out := leaseResult{
		Backend:    *name,
		Goroutines: *goroutines,
		OpsPerSec:  round1(res.OpsPerSec),
		P50us:      round1(float64(res.P50) / 1e3),
		P99us:      round1(float64(res.P99) / 1e3),
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	_, err = fmt.Fprintf(stdout, "%s, %d goroutines, %s: %.0f acquire+release/s, p50 %.0fµs, p99 %.0fµs (%d ops)\n",
		out.Backend, out.Goroutines, *duration, out.OpsPerSec, out.P50us, out.P99us, res.Ops)
	return err
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
