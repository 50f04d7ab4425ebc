package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
	"github.com/aegislab/aegis/tracing"
)

// traceArm is one way of running the Locker in aegis bench lease
// --tracing.
type traceArm struct {
	name, what string
	locker     aegis.Locker

	rec     measure.Recorder
	ops     int
	elapsed time.Duration
	cpu     time.Duration
}

// traceArms are the arms of the tracing comparison on l: off (l itself),
// never (traced, never sampled), always (traced, every span sampled and
// exported in batches to an exporter that discards them). The returned
// function shuts the providers down.
func traceArms(l aegis.Locker) ([]*traceArm, func()) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	always := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	arms := []*traceArm{
		{name: "off", what: "the Locker as it is: no TracerProvider (tracing.Locker returns it unchanged)", locker: tracing.Locker(l, nil)},
		{name: "never", what: "traced, with a TracerProvider whose sampler never samples", locker: tracing.Locker(l, never)},
		{name: "always", what: "traced, every span sampled, batched and exported to an exporter that discards it", locker: tracing.Locker(l, always)},
	}
	return arms, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = never.Shutdown(ctx)
		_ = always.Shutdown(ctx)
	}
}

type traceArmResult struct {
	Arm        string  `json:"arm"`
	Ops        int     `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	CPUusPerOp float64 `json:"cpu_us_per_op"`
	Ratio      float64 `json:"ops_ratio_to_off"`
}

type traceResult struct {
	Backend    string           `json:"backend"`
	Goroutines int              `json:"goroutines"`
	Rounds     int              `json:"rounds"`
	RoundMS    int64            `json:"round_ms"`
	LoadStart  string           `json:"loadavg_start"`
	LoadEnd    string           `json:"loadavg_end"`
	Arms       []traceArmResult `json:"arms"`
}

// benchTracing runs acquire+release of keys on l in each arm, rounds
// times for round each, the arms in a rotating order (off, never, always;
// never, always, off; …) so that a drift of the machine or the server
// falls on every arm alike.
func benchTracing(ctx context.Context, l aegis.Locker, name string, keys []string, rounds int, round time.Duration, asJSON bool, stdout io.Writer) error {
	arms, shutdown := traceArms(l)
	defer shutdown()
	const ttl = time.Minute
	res := traceResult{Backend: name, Goroutines: len(keys), Rounds: rounds, RoundMS: round.Milliseconds(), LoadStart: loadavg()}
	for r := range rounds {
		for j := range arms {
			a := arms[(j+r)%len(arms)]
			op := func(ctx context.Context, g int) error {
				lease, err := a.locker.TryAcquire(ctx, keys[g], ttl)
				if err != nil {
					return err
				}
				return a.locker.Release(ctx, lease)
			}
			c0 := processCPU()
			n, took, err := measure.For(ctx, len(keys), round, op, &a.rec)
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return fmt.Errorf("tracing %s, round %d: %w", a.name, r+1, err)
			}
			a.cpu += processCPU() - c0
			a.ops += n
			a.elapsed += took
		}
	}
	res.LoadEnd = loadavg()
	off := float64(arms[0].ops) / arms[0].elapsed.Seconds()
	for _, a := range arms {
		perSec := float64(a.ops) / a.elapsed.Seconds()
		res.Arms = append(res.Arms, traceArmResult{
			Arm:        a.name,
			Ops:        a.ops,
			OpsPerSec:  round1(perSec),
			P50us:      round1(float64(a.rec.Percentile(50)) / 1e3),
			P99us:      round1(float64(a.rec.Percentile(99)) / 1e3),
			CPUusPerOp: round1(float64(a.cpu) / 1e3 / float64(max(a.ops, 1))),
			Ratio:      float64(int64(perSec/off*1000+0.5)) / 1000,
		})
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s, %d goroutines, acquire+release of a free key, %d interleaved rounds of %s per arm; %d CPUs, %s; load average at the start %s, at the end %s\n\n",
		name, len(keys), rounds, round, runtime.NumCPU(), runtime.Version(), res.LoadStart, res.LoadEnd)
	fmt.Fprintln(stdout, "| arm | acquire+release/s | p50 µs | p99 µs | client CPU µs/op | ratio to off |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|")
	for i, a := range res.Arms {
		fmt.Fprintf(stdout, "| %s: %s | %.0f | %.0f | %.0f | %.1f | %.3f× |\n", a.Arm, arms[i].what, a.OpsPerSec, a.P50us, a.P99us, a.CPUusPerOp, a.Ratio)
	}
	return nil
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadavg is the first three fields of /proc/loadavg, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
