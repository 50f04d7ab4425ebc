package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/aegislab/aegis/bench/plot"
	"github.com/aegislab/aegis/internal/testing/queuebench"
)

// reportOptions are the flags of -mode report.
type reportOptions struct {
	md, png     string
	command     string // the command line, for the fragment's first sentence
	jobs        int
	workers     int
	rounds      int
	scale       []int
	scaleJobs   int
	deepJobs    int
	deepFor     time.Duration
	soak        time.Duration
	soakWindow  time.Duration
	riverSlowBy int // River's default cooldown runs jobs/riverSlowBy jobs
	realistic   queuebench.RealisticOptions
}

// system is one queue of the comparison.
type system struct {
	name string
	burn func(ctx context.Context, url string, jobs, workers int, limit time.Duration) (queuebench.Result, error)
}

func aegisSystem(name string, o queuebench.Options) system {
	return system{name, func(ctx context.Context, url string, jobs, workers int, limit time.Duration) (queuebench.Result, error) {
		o := o
		o.For = limit
		if o.ClaimAhead > 0 {
			o.ClaimAhead = workers
		}
		return queuebench.BurnDown(ctx, url, jobs, workers, o)
	}}
}

var (
	sysAegis      = aegisSystem("aegis", queuebench.Options{})
	sysAegisAhead = aegisSystem("aegis, ClaimAhead = workers", queuebench.Options{ClaimAhead: 1}) // any positive value: ClaimAhead = workers
	sysRiver      = system{"River, 1 ms cooldown", func(ctx context.Context, url string, jobs, workers int, limit time.Duration) (queuebench.Result, error) {
		return burnRiver(ctx, url, jobs, workers, time.Millisecond, limit)
	}}
	sysRiverSlow = system{"River, default cooldown", func(ctx context.Context, url string, jobs, workers int, limit time.Duration) (queuebench.Result, error) {
		return burnRiver(ctx, url, jobs, workers, 0, limit)
	}}
	sysGraphile = system{"graphile-worker", burnGraphile}
	sysBare     = system{"bare protocol", func(ctx context.Context, url string, jobs, _ int, limit time.Duration) (queuebench.Result, error) {
		return queuebench.BareBurnDown(ctx, url, jobs, queuebench.BareOptions{For: limit})
	}}
	reportSystems = []system{sysAegis, sysAegisAhead, sysBare, sysRiverSlow, sysRiver, sysGraphile}
)

// report runs the burn-down rounds, the worker-count curve, the deep
// backlog and a short soak, and writes the Markdown fragment and the PNGs.
func report(ctx context.Context, url string, o reportOptions) error {
	if o.md == "" {
		return fmt.Errorf("-mode report needs -md FILE")
	}
	if o.png != "" {
		if err := os.MkdirAll(o.png, 0o755); err != nil {
			return err
		}
	}
	if _, err := ensureGraphile(ctx); err != nil {
		return err
	}
	startLoad := loadavgFull()
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%5.0fs load %s] ", time.Since(began).Seconds(), loadavg())
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}

	// 1. Burn-down rounds, interleaved.
	burn := map[string][]float64{}
	costs := map[string][]queuebench.PerJob{}
	for r := range o.rounds {
		for _, s := range reportSystems {
			jobs := o.jobs
			if s.name == sysRiverSlow.name {
				jobs = max(o.jobs/o.riverSlowBy, 1)
			}
			res, err := s.burn(ctx, url, jobs, o.workers, 0)
			if err != nil {
				return fmt.Errorf("burn-down, %s: %w", s.name, err)
			}
			logf("round %d  %-24s %9.0f jobs/s; per job: %s", r+1, s.name, res.JobsPerSec, costText(res.Cost))
			burn[s.name] = append(burn[s.name], res.JobsPerSec)
			costs[s.name] = append(costs[s.name], res.Cost)
		}
	}

	// 2. Worker counts, interleaved (River's default cooldown left out: it
	// is bound by its cooldown, not by the queue).
	curve := []system{sysAegis, sysAegisAhead, sysRiver, sysGraphile}
	scale := map[string][]float64{}
	for _, w := range o.scale {
		for _, s := range curve {
			res, err := s.burn(ctx, url, o.scaleJobs, w, 0)
			if err != nil {
				return fmt.Errorf("scale, %d workers, %s: %w", w, s.name, err)
			}
			logf("%4d workers  %-24s %9.0f jobs/s", w, s.name, res.JobsPerSec)
			scale[s.name] = append(scale[s.name], res.JobsPerSec)
		}
	}

	// 3. A deep backlog: deepJobs queued, worked for deepFor.
	deep := map[string]queuebench.Result{}
	for _, s := range curve {
		res, err := s.burn(ctx, url, o.deepJobs, o.workers, o.deepFor)
		if err != nil {
			return fmt.Errorf("%d jobs queued, %s: %w", o.deepJobs, s.name, err)
		}
		logf("%d queued  %-24s %9.0f jobs/s over %s (insert %.0f jobs/s)", o.deepJobs, s.name, res.JobsPerSec, o.deepFor, res.InsertPerSec)
		deep[s.name] = res
	}

	// 4. The soak.
	soaked, err := runSoak(ctx, url, o.workers, o.soak, o.soakWindow, 0)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}

	// 5. The realistic workload.
	realRuns, err := realistic(ctx, url, o.workers, o.realistic, false)
	if err != nil {
		return err
	}
	endLoad := loadavgFull()

	var b strings.Builder
	fmt.Fprintf(&b, "Measured by `%s` (PostgreSQL on loopback, every system with %d workers and a pool of %d connections, no-op jobs inserted first in bulk and then timed until drained, %d interleaved rounds; River v0.51.2; graphile-worker %s with its local queue of workers+1 jobs and batched completions; aegis with its defaults and with `ClaimAhead` = workers, its counterpart of the local queue). Load average (/proc/loadavg) at start: `%s`; at end: `%s`.\n\n",
		o.command, o.workers, queuebench.PoolSize, o.rounds, cmpOr(graphileVersion, "?"), startLoad, endLoad)

	fmt.Fprintf(&b, "| burn-down of %s jobs, %d workers | ", thousands(o.jobs), o.workers)
	for r := range o.rounds {
		fmt.Fprintf(&b, "round %d | ", r+1)
	}
	b.WriteString("median | statements/job | commits/job | WAL bytes/job |\n|---|")
	b.WriteString(strings.Repeat("---:|", o.rounds+4))
	b.WriteString("\n")
	for _, s := range reportSystems {
		name := s.name
		switch s.name {
		case sysAegis.name:
			name = "**aegis**, defaults, every completion fenced"
		case sysAegisAhead.name:
			name = "**aegis**, `ClaimAhead` = workers, every completion fenced"
		}
		if s.name == sysRiverSlow.name {
			name = fmt.Sprintf("River, default 100 ms cooldown (%s jobs)", thousands(max(o.jobs/o.riverSlowBy, 1)))
		}
		if s.name == sysBare.name {
			name = fmt.Sprintf("bare protocol, %d claimers × %d (no fence, heartbeat or reaper)", queuebench.BareDefaults.Claimers, queuebench.BareDefaults.Batch)
		}
		fmt.Fprintf(&b, "| %s | ", name)
		for _, v := range burn[s.name] {
			fmt.Fprintf(&b, "%s | ", thousands(int(v+0.5)))
		}
		st, co, wal := medianCost(costs[s.name])
		fmt.Fprintf(&b, "%s | %s | %s | %s |\n", thousands(int(median(burn[s.name])+0.5)), perJob(st, 3), perJob(co, 3), perJob(wal, 0))
	}
	ratioRow := func(a, peer string) ([]float64, float64) {
		var rs []float64
		for i := range burn[a] {
			rs = append(rs, burn[a][i]/burn[peer][i])
		}
		return rs, median(rs)
	}
	for _, a := range []string{sysAegis.name, sysAegisAhead.name} {
		for _, peer := range []string{sysBare.name, sysRiver.name, sysGraphile.name, sysRiverSlow.name} {
			rs, m := ratioRow(a, peer)
			fmt.Fprintf(&b, "| %s / %s | ", a, peer)
			for _, r := range rs {
				fmt.Fprintf(&b, "%.2f× | ", r)
			}
			fmt.Fprintf(&b, "%.2f× | | | |\n", m)
		}
	}

	_, hb := ratioRow(sysAegis.name, sysBare.name)
	_, hr := ratioRow(sysAegis.name, sysRiver.name)
	_, hg := ratioRow(sysAegis.name, sysGraphile.name)
	fmt.Fprintf(&b, "\n**aegis (defaults) / the bare protocol: %.2f×** (target ≥ 0.7×: %s); aegis / River (1 ms): %.2f×; aegis / graphile-worker: %.2f× (medians of the rounds' ratios).\n",
		hb, metOrMissed(hb, 0.7), hr, hg)
	b.WriteString("Per job, over the work phase only (not the insert): statements are pg_stat_statements' calls in the database (BEGIN and COMMIT count; ? when the server does not load it), commits pg_stat_database.xact_commit of the database, WAL bytes the distance pg_current_wal_lsn() moved (pg_stat_wal lags: a backend flushes its counts at most once a second); every backend of the run is made to flush its counts (pg_stat_force_next_flush) before each reading, and the bench's own statements (its polls for the end, its readings) are subtracted. The counters are the database's and the server's: the figures are the run's when nothing else uses the server. graphile-worker's runner (Node) waits between its insert and its work for the first reading and is read again once its connections are gone (a backend flushes its counts as it exits).\n")

	fmt.Fprintf(&b, "\n| burn-down of %s jobs by workers | ", thousands(o.scaleJobs))
	for _, s := range curve {
		fmt.Fprintf(&b, "%s | ", s.name)
	}
	fmt.Fprintf(&b, "aegis / River | aegis / graphile-worker | ClaimAhead / River | ClaimAhead / graphile-worker |\n|---:|%s\n", strings.Repeat("---:|", len(curve)+4))
	for i, w := range o.scale {
		fmt.Fprintf(&b, "| %s |", thousands(w))
		for _, s := range curve {
			fmt.Fprintf(&b, " %s |", thousands(int(scale[s.name][i]+0.5)))
		}
		for _, a := range []string{sysAegis.name, sysAegisAhead.name} {
			fmt.Fprintf(&b, " %.2f× | %.2f× |", scale[a][i]/scale[sysRiver.name][i], scale[a][i]/scale[sysGraphile.name][i])
		}
		b.WriteString("\n")
	}

	fmt.Fprintf(&b, "\n| %s jobs queued, %d workers, first %s | jobs/s | insert jobs/s | aegis / it | ClaimAhead / it |\n|---|---:|---:|---:|---:|\n", thousands(o.deepJobs), o.workers, o.deepFor)
	for _, s := range curve {
		r := deep[s.name]
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f× | %.2f× |\n", s.name, thousands(int(r.JobsPerSec+0.5)), thousands(int(r.InsertPerSec+0.5)),
			deep[sysAegis.name].JobsPerSec/r.JobsPerSec, deep[sysAegisAhead.name].JobsPerSec/r.JobsPerSec)
	}

	sorted := slices.Sorted(slices.Values(soaked.Windows))
	fmt.Fprintf(&b, "\nSoak (aegis; 2 goroutines enqueue batches of 100 while %d workers work them, backlog capped at 20,000), %s in %s windows: median %s jobs/s, min %s, max %s, worst window %.1f%% from the median.\n",
		o.workers, o.soak, o.soakWindow, thousands(int(soaked.Median+0.5)), thousands(int(sorted[0]+0.5)), thousands(int(sorted[len(sorted)-1]+0.5)), soaked.MaxDevPct)
	// A correlation of a few windows says nothing (with three it is ±1).
	follow := "too few windows to correlate jobs/s with it"
	if len(soaked.Windows) >= 10 {
		follow = fmt.Sprintf("jobs/s follow it (r = %.2f)", soaked.ProbeR)
	}
	fmt.Fprintf(&b, "The machine's own memory speed (a probe beside the soak: dependent loads through 128 MB per second of its thread's CPU) moved %.1f%% from its median over the same windows; %s, and jobs/s over the probe's speed stay within %.1f%% of their median.\n",
		soaked.ProbeDev, follow, soaked.PerProbeDev)

	ro := o.realistic
	fmt.Fprintf(&b, "\nRealistic workload (the shape of hardbyte's queue benchmark): each job's handler sleeps 1 ms, %d goroutines enqueue batches of %d keeping about %s jobs available, measured for %s after a %s warm-up, one system after the other. Latency is enqueue-to-start: from before the job's insert is sent (its args carry that time) to its handler's first read of the clock; with a standing depth it is about the depth over the throughput (Little's law), so it ranks the systems as jobs/s does.\n\n",
		cmp.Or(ro.Enqueuers, 2), cmp.Or(ro.Batch, 100), thousands(cmp.Or(ro.Depth, 4000)), ro.Duration, ro.Warmup)
	b.WriteString("| 1 ms of work per job | jobs in flight | jobs/s | enqueue-to-start p50 | p99 |\n|---|---:|---:|---:|---:|\n")
	for _, r := range realRuns {
		fmt.Fprintf(&b, "| %s | %d | %s | %.2f ms | %.2f ms |\n", r.System, r.Workers, thousands(int(r.JobsPerSec+0.5)), r.P50ms, r.P99ms)
	}

	_, mr := ratioRow(sysAegisAhead.name, sysRiver.name)
	_, mg := ratioRow(sysAegisAhead.name, sysGraphile.name)
	_, dr := ratioRow(sysAegis.name, sysRiver.name)
	_, dg := ratioRow(sysAegis.name, sysGraphile.name)
	fmt.Fprintf(&b, "\nTarget aegis ≥ 3× River (1 ms): with ClaimAhead %s (median %.2f×), with defaults %s (%.2f×). Target aegis ≥ 2× graphile-worker: with ClaimAhead %s (median %.2f×), with defaults %s (%.2f×).\n",
		metOrMissed(mr, 3), mr, metOrMissed(dr, 3), dr, metOrMissed(mg, 2), mg, metOrMissed(dg, 2), dg)
	within := "yes"
	if soaked.MaxDevPct > 20 {
		within = "no"
	}
	// A report's soak is a few windows: the ±20% target is judged on the
	// 10-minute one, which the report does not run.
	fmt.Fprintf(&b, "This %s soak's worst window within ±20%% of its median: %s (%.1f%%). The target is judged on the 10-minute soak (`make soak-queue`), which this report does not run: docs/queue.md has its runs.\n", o.soak, within, soaked.MaxDevPct)
	if err := os.WriteFile(o.md, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())

	if o.png == "" {
		return nil
	}
	xs := make([]float64, len(o.scale))
	for i, w := range o.scale {
		xs[i] = float64(w)
	}
	var ws []plot.Series
	for _, s := range curve {
		ws = append(ws, plot.Series{Name: s.name, X: xs, Y: scale[s.name]})
	}
	if err := plot.Save(plot.Chart{Title: fmt.Sprintf("Queue burn-down of %s no-op jobs by workers", thousands(o.scaleJobs)), X: "workers", Y: "jobs/s", LogX: true, Series: ws},
		filepath.Join(o.png, "queue-workers.png"), 7*vg.Inch, 4.5*vg.Inch); err != nil {
		return err
	}
	var ds []plot.Series
	for _, s := range curve {
		per := deep[s.name].PerSecond
		x := make([]float64, len(per))
		for i := range per {
			x[i] = float64(i + 1)
		}
		ds = append(ds, plot.Series{Name: s.name, X: x, Y: per})
	}
	if err := plot.Save(plot.Chart{Title: fmt.Sprintf("Jobs worked per second with %s jobs queued", thousands(o.deepJobs)), X: "second", Y: "jobs/s", Series: ds},
		filepath.Join(o.png, "queue-backlog.png"), 7*vg.Inch, 4.5*vg.Inch); err != nil {
		return err
	}
	sx := make([]float64, len(soaked.Windows))
	for i := range sx {
		sx[i] = float64(i+1) * o.soakWindow.Seconds()
	}
	return plot.Save(plot.Chart{Title: "aegis soak: jobs/s per window, enqueueing and working at once", X: "seconds", Y: "jobs/s",
		Series: []plot.Series{{Name: "aegis", X: sx, Y: soaked.Windows}}},
		filepath.Join(o.png, "queue-soak.png"), 7*vg.Inch, 4.5*vg.Inch)
}

// medianCost is the median of each figure per job over runs, NaN when any
// run did not know it.
func medianCost(runs []queuebench.PerJob) (statements, commits, wal float64) {
	pick := func(f func(queuebench.PerJob) float64) float64 {
		var v []float64
		for _, r := range runs {
			if math.IsNaN(f(r)) {
				return math.NaN()
			}
			v = append(v, f(r))
		}
		if len(v) == 0 {
			return math.NaN()
		}
		return median(v)
	}
	return pick(func(p queuebench.PerJob) float64 { return p.Statements }),
		pick(func(p queuebench.PerJob) float64 { return p.Commits }),
		pick(func(p queuebench.PerJob) float64 { return p.WALBytes })
}

func metOrMissed(got, want float64) string {
	if got >= want {
		return "met"
	}
	return fmt.Sprintf("missed by %.0f%%", (want-got)/want*100)
}

func median(v []float64) float64 {
	m, _ := medianDev(v)
	return m
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// loadavgFull is /proc/loadavg's first three fields.
func loadavgFull() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// thousands formats n with commas.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out, nil
}
