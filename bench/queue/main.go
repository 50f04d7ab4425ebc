// Command queue compares the aegis queue with River (v0.51) and
// graphile-worker (npm, installed by scripts/graphile-worker, run with node)
// on the same PostgreSQL in one run, and runs the aegis queue's steady soak.
//
//	go run ./queue -mode compare [-jobs 50000] [-workers 100] [-runs 1]   # burn-down: aegis vs River (default and 1 ms fetch cooldown)
//	go run ./queue -mode latency [-samples 300]                            # insert-to-start on an idle queue, aegis vs River
//	go run ./queue -mode soak [-duration 10m] [-window 10s]                # aegis: enqueue and work at once, jobs/s per window
//	go run ./queue -mode probe [-duration 2m] [-window 10s]                # the soak's memory probe alone: how much the machine moves by itself
//	go run ./queue -mode realistic [-duration 20s] [-warmup 5s] [-depth 4000]  # 1 ms of work per job, 4,000 jobs standing: aegis, River (1 ms), the bare protocol
//	go run ./queue -mode report -md FILE [-png DIR]                         # all of it, short, as a Markdown fragment and PNGs
//
// The server is AEGIS_POSTGRES_URL (default: the shared test server of
// scripts/services). Every run uses a schema of its own, dropped at the
// end. Both systems get the same worker count and the same pool size
// (queuebench.PoolSize). Every aegis completion is fenced (WHERE id AND
// token); River's is not (WHERE state = 'running').
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/queuebench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "queue bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	mode := fs.String("mode", "compare,latency", "what to run, comma-separated: compare, latency, soak, probe, realistic, report")
	jobs := fs.Int("jobs", 50000, "burn-down: no-op jobs")
	workers := fs.Int("workers", 100, "workers of each client")
	runs := fs.Int("runs", 1, "burn-down: rounds (aegis, River default, River 1ms, interleaved)")
	samples := fs.Int("samples", 300, "latency: samples")
	duration := fs.Duration("duration", 10*time.Minute, "soak: how long; realistic: how long it is measured (default there 20s)")
	warmup := fs.Duration("warmup", 5*time.Second, "realistic and report: the warm-up before the measure")
	depth := fs.Int("depth", 4000, "realistic and report: available jobs kept standing")
	realisticFor := fs.Duration("realistic", 20*time.Second, "report: how long the realistic workload is measured")
	window := fs.Duration("window", 10*time.Second, "soak: throughput window")
	rate := fs.Float64("rate", 0, "soak: offered load in jobs/s (0: as fast as the queue works, the backlog capped)")
	asJSON := fs.Bool("json", false, "print one JSON object per result")
	fs.DurationVar(&compareFor, "for", 0, "compare: stop each burn-down after this long and report the jobs handled over it (a backlog too deep to drain)")
	only := fs.String("systems", "", "compare: only the systems whose names contain one of these comma-separated words (default all)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the bench process to this file")
	fs.StringVar(&graphileScript, "graphile-script", graphileScript, "the script that installs graphile-worker")
	md := fs.String("md", "", "report: write the Markdown fragment to this file")
	png := fs.String("png", "", "report: write queue-workers.png, queue-backlog.png and queue-soak.png into this folder")
	rounds := fs.Int("rounds", 3, "report: interleaved burn-down rounds")
	scaleWorkers := fs.String("scale-workers", "10,100,1000", "report: worker counts of the curve")
	scaleJobs := fs.Int("scale-jobs", 50000, "report: jobs of each point of the curve")
	deepJobs := fs.Int("deep-jobs", 1000000, "report: jobs queued for the deep-backlog run")
	deepFor := fs.Duration("deep-for", 8*time.Second, "report: how long the deep backlog is worked")
	soakFor := fs.Duration("soak", 30*time.Second, "report: the soak's length")
	riverSlowBy := fs.Int("river-default-divisor", 10, "report: River with its default cooldown burns -jobs divided by this (its 100 ms cooldown caps it near workers/100ms)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	systemFilter = *only
	url := backend.FromEnv().PostgresURL
	for _, m := range strings.Split(*mode, ",") {
		var err error
		switch m {
		case "compare":
			err = compare(ctx, url, *jobs, *workers, *runs, *asJSON)
		case "latency":
			err = latency(ctx, url, *samples, *asJSON)
		case "soak":
			err = soak(ctx, url, *workers, *duration, *window, *rate, *asJSON)
		case "probe":
			err = probeAlone(ctx, *duration, *window)
		case "realistic":
			d := 20 * time.Second
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "duration" {
					d = *duration
				}
			})
			_, err = realistic(ctx, url, *workers, queuebench.RealisticOptions{Depth: *depth, Warmup: *warmup, Duration: d}, *asJSON)
		case "report":
			var scale []int
			if scale, err = parseInts(*scaleWorkers); err != nil {
				return fmt.Errorf("-scale-workers: %w", err)
			}
			err = report(ctx, url, reportOptions{
				md: *md, png: *png, command: "cd bench && go run ./queue " + strings.Join(args, " "),
				jobs: *jobs, workers: *workers, rounds: *rounds, scale: scale, scaleJobs: *scaleJobs,
				deepJobs: *deepJobs, deepFor: *deepFor, soak: *soakFor, soakWindow: *window, riverSlowBy: max(*riverSlowBy, 1),
				realistic: queuebench.RealisticOptions{Depth: *depth, Warmup: *warmup, Duration: *realisticFor},
			})
		default:
			err = fmt.Errorf("unknown -mode %q (compare, latency, soak, probe, realistic, report)", m)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// systemFilter is -systems, compareFor -for.
var (
	systemFilter string
	compareFor   time.Duration
)

func selected(name string) bool {
	if systemFilter == "" {
		return true
	}
	for _, w := range strings.Split(systemFilter, ",") {
		if w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

type burnResult struct {
	System string `json:"system"`
	queuebench.Result
}

func compare(ctx context.Context, url string, jobs, workers, runs int, asJSON bool) error {
	systems := []struct {
		name string
		run  func() (queuebench.Result, error)
	}{
		{"aegis (batched, fenced)", func() (queuebench.Result, error) {
			return queuebench.BurnDown(ctx, url, jobs, workers, queuebench.Options{For: compareFor})
		}},
		{"aegis (batched, fenced, ClaimAhead)", func() (queuebench.Result, error) {
			return queuebench.BurnDown(ctx, url, jobs, workers, queuebench.Options{ClaimAhead: workers, For: compareFor})
		}},
		{"aegis (sync, fenced)", func() (queuebench.Result, error) {
			return queuebench.BurnDown(ctx, url, jobs, workers, queuebench.Options{SyncComplete: true, For: compareFor})
		}},
		bareCompare(ctx, url, jobs, 1, 500),
		bareCompare(ctx, url, jobs, 2, 500),
		bareCompare(ctx, url, jobs, 4, 100),
		bareCompare(ctx, url, jobs, 2, 1000),
		{"river (cooldown 100ms, default)", func() (queuebench.Result, error) { return burnRiver(ctx, url, jobs, workers, 0, compareFor) }},
		{"river (cooldown 1ms)", func() (queuebench.Result, error) {
			return burnRiver(ctx, url, jobs, workers, time.Millisecond, compareFor)
		}},
		{"graphile-worker (local queue)", func() (queuebench.Result, error) { return burnGraphile(ctx, url, jobs, workers, compareFor) }},
	}
	if workers != 500 { // 1 × 500 is there already
		// As many jobs in flight as aegis's workers: the bound at the same
		// concurrency, not the best one.
		systems = append(systems, bareCompare(ctx, url, jobs, 1, workers))
	}
	systems = slices.DeleteFunc(systems, func(s struct {
		name string
		run  func() (queuebench.Result, error)
	}) bool {
		return !selected(s.name)
	})
	best := map[string]queuebench.Result{}
	for r := range runs {
		for _, s := range systems {
			res, err := s.run()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if asJSON {
				if err := json.NewEncoder(os.Stdout).Encode(burnResult{s.name, res}); err != nil {
					return err
				}
			} else {
				fmt.Printf("round %d  %-38s %9.0f jobs/s  (insert %8.0f jobs/s)  CPU per job: bench process %5.1f µs, its PostgreSQL backends %5.1f µs; per job: %s%s; load %s\n",
					r+1, s.name, res.JobsPerSec, res.InsertPerSec, us(res.ClientCPU), us(res.ServerCPU), costText(res.Cost), claimText(res), loadavg())
			}
			if res.JobsPerSec > best[s.name].JobsPerSec {
				best[s.name] = res
			}
		}
	}
	if !asJSON && systemFilter == "" {
		a, ca, r1, g := best[systems[0].name], best[systems[1].name], best["river (cooldown 1ms)"], best["graphile-worker (local queue)"]
		bare := best[bareName(queuebench.BareDefaults.Claimers, queuebench.BareDefaults.Batch)]
		fmt.Printf("\n%d jobs, %d workers, pool %d, best of %d: aegis/bare protocol (%d × %d) = %.2f× (ClaimAhead %.2f×), aegis/river(1ms) = %.2f× (ClaimAhead %.2f×), aegis/graphile-worker = %.2f× (ClaimAhead %.2f×), aegis/river(default) = %.2f×, aegis sync/river(1ms) = %.2f×\n",
			jobs, workers, queuebench.PoolSize, runs, queuebench.BareDefaults.Claimers, queuebench.BareDefaults.Batch, a.JobsPerSec/bare.JobsPerSec, ca.JobsPerSec/bare.JobsPerSec,
			a.JobsPerSec/r1.JobsPerSec, ca.JobsPerSec/r1.JobsPerSec, a.JobsPerSec/g.JobsPerSec, ca.JobsPerSec/g.JobsPerSec,
			a.JobsPerSec/best["river (cooldown 100ms, default)"].JobsPerSec, best[systems[2].name].JobsPerSec/r1.JobsPerSec)
	}
	return nil
}

// bareName is the bare protocol's name with claimers × batch.
func bareName(claimers, batch int) string {
	return fmt.Sprintf("bare protocol (%d × %d)", claimers, batch)
}

// bareCompare is the bare protocol with claimers × batch, for compare.
func bareCompare(ctx context.Context, url string, jobs, claimers, batch int) struct {
	name string
	run  func() (queuebench.Result, error)
} {
	return struct {
		name string
		run  func() (queuebench.Result, error)
	}{bareName(claimers, batch), func() (queuebench.Result, error) {
		return queuebench.BareBurnDown(ctx, url, jobs, queuebench.BareOptions{Claimers: claimers, Batch: batch, For: compareFor})
	}}
}

// claimText says how an aegis burn-down's claims went: their count, jobs
// per claim, and the share of the run its claim statements took (near
// 100% per claim loop: the claims are the bound).
func claimText(res queuebench.Result) string {
	if res.Claims == 0 {
		return ""
	}
	return fmt.Sprintf("; %d claims of %.0f jobs, claim statements %.0f%% of the run", res.Claims, float64(res.Jobs)/float64(res.Claims), res.ClaimBusy*100)
}

type latencyResult struct {
	System  string  `json:"system"`
	Samples int     `json:"samples"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
}

func latency(ctx context.Context, url string, samples int, asJSON bool) error {
	const gap = 10 * time.Millisecond
	systems := []struct {
		name string
		run  func() ([]time.Duration, error)
	}{
		{"aegis", func() ([]time.Duration, error) { return queuebench.Latency(ctx, url, samples, gap) }},
		{"river (cooldown 100ms, default)", func() ([]time.Duration, error) { return latencyRiver(ctx, url, samples, gap, 0) }},
		{"river (cooldown 1ms)", func() ([]time.Duration, error) { return latencyRiver(ctx, url, samples, gap, time.Millisecond) }},
	}
	for _, s := range systems {
		if !selected(s.name) {
			continue
		}
		d, err := s.run()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		res := latencyResult{System: s.name, Samples: len(d), P50ms: ms(percentile(d, 50)), P99ms: ms(percentile(d, 99))}
		if asJSON {
			if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
				return err
			}
		} else {
			fmt.Printf("insert-to-start, idle queue, %-32s p50 %6.2f ms  p99 %6.2f ms  (%d samples)\n", s.name, res.P50ms, res.P99ms, res.Samples)
		}
	}
	return nil
}

// realisticBare is the bare protocol's claimers × batch in the realistic
// workload: 100 jobs in flight at most, as the others' 100 workers (2 × 50
// did 29.0k and 29.5k jobs/s where 4 × 25 did 22.1k and 25.5k, 5 s runs
// on a loaded 2-core machine).
var realisticBare = queuebench.BareOptions{Claimers: 2, Batch: 50}

type realisticResult struct {
	System  string  `json:"system"`
	Workers int     `json:"workers"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	queuebench.RealisticResult
}

// realistic runs the realistic workload on aegis (defaults), River (1 ms
// cooldown) and the bare protocol, one after the other, and prints each.
func realistic(ctx context.Context, url string, workers int, o queuebench.RealisticOptions, asJSON bool) ([]realisticResult, error) {
	systems := []struct {
		name    string
		workers int
		run     func() (queuebench.RealisticResult, error)
	}{
		{"aegis", workers, func() (queuebench.RealisticResult, error) { return queuebench.RealisticAegis(ctx, url, workers, o) }},
		{"River, 1 ms cooldown", workers, func() (queuebench.RealisticResult, error) { return realisticRiver(ctx, url, workers, o) }},
		{fmt.Sprintf("bare protocol, %d claimers × %d", realisticBare.Claimers, realisticBare.Batch), realisticBare.Claimers * realisticBare.Batch,
			func() (queuebench.RealisticResult, error) {
				return queuebench.RealisticBare(ctx, url, realisticBare, o)
			}},
	}
	var out []realisticResult
	for _, s := range systems {
		if !selected(s.name) {
			continue
		}
		res, err := s.run()
		if err != nil {
			return nil, fmt.Errorf("realistic, %s: %w", s.name, err)
		}
		r := realisticResult{System: s.name, Workers: s.workers, P50ms: ms(res.P50), P99ms: ms(res.P99), RealisticResult: res}
		out = append(out, r)
		if asJSON {
			if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
				return nil, err
			}
			continue
		}
		fmt.Printf("realistic (1 ms of work per job, %d standing), %-32s %8.0f jobs/s  enqueue-to-start p50 %7.2f ms  p99 %7.2f ms  (%d started; load %s)\n",
			cmp.Or(o.Depth, 4000), s.name, r.JobsPerSec, r.P50ms, r.P99ms, r.Started, loadavg())
	}
	return out, nil
}

type soakResult struct {
	Workers   int       `json:"workers"`
	Rate      float64   `json:"offered_jobs_per_sec"`
	DurationS float64   `json:"duration_s"`
	WindowS   float64   `json:"window_s"`
	Windows   []float64 `json:"jobs_per_sec_windows"`
	Median    float64   `json:"median_jobs_per_sec"`
	MaxDevPct float64   `json:"max_deviation_pct"`
	WithinPct float64   `json:"target_pct"`
	Pass      bool      `json:"pass"`
	Inserted  int64     `json:"inserted"`
	Worked    int64     `json:"worked"`
	PerCPU    []float64 `json:"jobs_per_cpu_second_windows"`
	PerCPUDev float64   `json:"jobs_per_cpu_second_max_deviation_pct"`
	// Probe is the memory probe's speed per window (M loads per
	// CPU-second of its thread), ProbeDev its worst window from its
	// median, ProbeR the correlation of jobs/s with it, and PerProbeDev
	// the worst window of jobs/s divided by the probe's speed.
	Probe       []float64 `json:"memory_probe_windows"`
	ProbeDev    float64   `json:"memory_probe_max_deviation_pct"`
	ProbeR      float64   `json:"jobs_per_sec_memory_probe_correlation"`
	PerProbeDev float64   `json:"jobs_per_probe_speed_max_deviation_pct"`
	Enqueuers   int       `json:"enqueuers"`
	BatchJobs   int       `json:"batch"`
	BacklogCap  int       `json:"backlog_cap"`
	LoadStart   string    `json:"loadavg_start,omitempty"`
	LoadEnd     string    `json:"loadavg_end,omitempty"`
}

func soak(ctx context.Context, url string, workers int, duration, window time.Duration, rate float64, asJSON bool) error {
	startLoad := loadavgFull()
	out, err := runSoak(ctx, url, workers, duration, window, rate)
	if err != nil {
		return err
	}
	out.LoadStart, out.LoadEnd = startLoad, loadavgFull()
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	sorted := slices.Sorted(slices.Values(out.Windows))
	effMedian, effDev := medianDev(out.PerCPU)
	fmt.Printf("steady run, %d workers, %s, %d windows of %s: median %.0f jobs/s, min %.0f, max %.0f, worst window %.1f%% from the median (target ±20%%: %s); %d inserted, %d worked\n",
		workers, duration, len(out.Windows), window, out.Median, sorted[0], sorted[len(sorted)-1], out.MaxDevPct,
		map[bool]string{true: "pass", false: "FAIL"}[out.Pass], out.Inserted, out.Worked)
	fmt.Printf("jobs per CPU-second (bench process + its PostgreSQL backends): median %.0f, worst window %.1f%% from the median\n", effMedian, effDev)
	fmt.Printf("memory probe (the machine's own speed, see probe.go): worst window %.1f%% from its median; correlation of jobs/s with it r = %.2f; jobs/s over the probe's speed: worst window %.1f%% from the median\n", out.ProbeDev, out.ProbeR, out.PerProbeDev)
	fmt.Printf("load average (/proc/loadavg) at start %s, at end %s\n", out.LoadStart, out.LoadEnd)
	return nil
}

// runSoak runs the steady soak, printing each window on stderr.
func runSoak(ctx context.Context, url string, workers int, duration, window time.Duration, rate float64) (soakResult, error) {
	o := queuebench.SteadyOptions{
		Workers: workers, Duration: duration, Window: window,
		Enqueuers: 2, Batch: 100, Backlog: 20000, Rate: rate,
	}
	cpu := newCPU()
	server := newServerCPU(ctx, url)
	defer server.close()
	vac := &vacuums{}
	o.Logger = slog.New(vac)
	var perCPU, probe []float64
	mem := startProbe(ctx)
	defer mem.stop()
	o.Progress = func(n int, jobs float64, backlog int64, app string) {
		speed := mem.take()
		probe = append(probe, speed)
		machine, self := cpu.sample()
		pg := server.sample(app)
		count, took := vac.take()
		eff := 0.0
		if self+pg > 0 {
			eff = jobs / ((self + pg) / 100)
		}
		perCPU = append(perCPU, eff)
		fmt.Fprintf(os.Stderr, "window %3d: %8.0f jobs/s  backlog %6d  CPU: machine %3.0f%% busy, bench process %3.0f%% of a core, its PostgreSQL backends %3.0f%% (%5.0f jobs per CPU-second); memory probe %.2f; load %s; %d vacuums (%s); hot table %s\n",
			n+1, jobs, backlog, machine, self, pg, eff, speed, loadavg(), count, took.Round(time.Millisecond), server.size(app))
	}
	res, err := queuebench.Steady(ctx, url, o)
	if err != nil {
		return soakResult{}, err
	}
	if len(res.Windows) == 0 {
		return soakResult{}, fmt.Errorf("the run was shorter than one window")
	}
	median, dev := medianDev(res.Windows)
	_, effDev := medianDev(perCPU)
	probe = probe[:min(len(probe), len(res.Windows))]
	_, probeDev := medianDev(probe)
	perProbe := make([]float64, len(probe))
	for i, s := range probe {
		if s > 0 {
			perProbe[i] = res.Windows[i] / s
		}
	}
	_, perProbeDev := medianDev(perProbe)
	return soakResult{
		Workers: workers, Rate: rate, DurationS: duration.Seconds(), WindowS: window.Seconds(), Windows: res.Windows,
		Median: median, MaxDevPct: round1(dev), WithinPct: 20, Pass: dev <= 20,
		Inserted: res.Inserted, Worked: res.Worked, PerCPU: perCPU, PerCPUDev: round1(effDev),
		Probe: probe, ProbeDev: round1(probeDev), ProbeR: math.Round(correlation(res.Windows, probe)*100) / 100, PerProbeDev: round1(perProbeDev),
		Enqueuers: o.Enqueuers, BatchJobs: o.Batch, BacklogCap: o.Backlog,
	}, nil
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// costText is a run's cost per job on one line.
func costText(c queuebench.PerJob) string {
	return fmt.Sprintf("%s statements, %s commits, %s WAL bytes", perJob(c.Statements, 3), perJob(c.Commits, 3), perJob(c.WALBytes, 0))
}

// perJob formats a figure per job with prec decimals, "?" when unknown.
func perJob(v float64, prec int) string {
	if math.IsNaN(v) {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// medianDev returns the median of v and the largest distance of an
// element from it, in % of it.
func medianDev(v []float64) (median, devPct float64) {
	if len(v) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(v))
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	for _, x := range v {
		devPct = max(devPct, abs(x-median)/median*100)
	}
	return median, devPct
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// cpu samples the machine's busy share (/proc/stat) and this process's CPU
// time between calls, to tell a slow window caused by other load on the
// machine from one caused by the queue.
type cpu struct {
	busy, total uint64
	self        time.Duration
	at          time.Time
}

func newCPU() *cpu {
	c := &cpu{}
	c.sample()
	return c
}

func (c *cpu) sample() (machinePct, selfPct float64) {
	var busy, total uint64
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			var v uint64
			fmt.Sscan(f, &v)
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	now := time.Now()
	if total > c.total {
		machinePct = float64(busy-c.busy) / float64(total-c.total) * 100
	}
	if !c.at.IsZero() {
		selfPct = float64(self-c.self) / float64(now.Sub(c.at)) * 100
	}
	c.busy, c.total, c.self, c.at = busy, total, self, now
	return machinePct, selfPct
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return "?"
	}
	return f[0]
}

// serverCPU samples the CPU time of the PostgreSQL backends serving one
// run (found by application_name), from /proc: the server runs on this
// machine.
type serverCPU struct {
	conn *pgx.Conn
	last map[int]uint64 // pid → utime+stime in clock ticks
	at   time.Time
}

func newServerCPU(ctx context.Context, url string) *serverCPU {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return &serverCPU{}
	}
	return &serverCPU{conn: conn, last: map[int]uint64{}, at: time.Now()}
}

func (s *serverCPU) close() {
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
	}
}

// size is the size of the run's hot table with its indexes.
func (s *serverCPU) size(app string) string {
	if s.conn == nil {
		return "?"
	}
	var size string
	err := s.conn.QueryRow(context.Background(),
		`SELECT pg_size_pretty(pg_total_relation_size(format('%I.aegis_job', $1::text)::regclass))`, app).Scan(&size)
	if err != nil {
		return "?"
	}
	return size
}

// sample returns the backends' CPU since the last call, in % of one core.
func (s *serverCPU) sample(app string) float64 {
	if s.conn == nil {
		return 0
	}
	var delta uint64
	for pid, now := range queuebench.BackendTicks(context.Background(), s.conn, app) {
		if prev, ok := s.last[int(pid)]; ok {
			delta += now - prev
		} else {
			delta += now // a new backend: all of its time is recent
		}
		s.last[int(pid)] = now
	}
	elapsed := time.Since(s.at)
	s.at = time.Now()
	return float64(delta) / 100 / elapsed.Seconds() * 100 // USER_HZ = 100
}

// vacuums is a slog handler that counts the queue's VACUUMs of its hot
// table and their time.
type vacuums struct {
	mu    sync.Mutex
	count int
	took  time.Duration
}

func (v *vacuums) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelDebug }
func (v *vacuums) WithAttrs([]slog.Attr) slog.Handler           { return v }
func (v *vacuums) WithGroup(string) slog.Handler                { return v }

func (v *vacuums) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var attrs []string
		r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
		fmt.Fprintln(os.Stderr, r.Level, r.Message, strings.Join(attrs, " "))
	}
	if r.Message != "queue: vacuumed the hot table" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "took" {
			v.mu.Lock()
			v.count++
			v.took += a.Value.Duration()
			v.mu.Unlock()
		}
		return true
	})
	return nil
}

func (v *vacuums) take() (int, time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, t := v.count, v.took
	v.count, v.took = 0, 0
	return c, t
}
