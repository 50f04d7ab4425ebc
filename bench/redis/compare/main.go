// Command compare measures the Redis locks of package redisbench in one
// run, on the same servers, and prints Markdown tables with the ratios.
//
//	cd bench && go run ./redis/compare [-private] [-rounds 5] [-round 1s] [-subjects IDS] [-contenders IDS] [-handoffs 300] [-md FILE] [-png DIR]
//
// Acquire+release subjects run in rounds, each subject for -round per
// round in a rotating order, so that load from elsewhere on the machine
// falls on every subject alike; the figures add up all rounds. Handoff
// contenders (the Redis locks, pglease on AEGIS_POSTGRES_URL and
// sqlitelease on a file of its own) run one after another, each until
// -handoffs handoffs (or -handoff-max passed). With -private it starts six
// Redis servers of its own, so that other programs using the shared ones
// do not disturb it (and the Redis CPU per operation can be read).
//
// -md FILE writes the report as a Markdown fragment (the command line,
// the load average at start and end, the tables, the targets of issues 16
// and 36);
// -png DIR writes redis-acquire-release.png there: acquire+release/s per
// subject against the goroutine counts of -goroutines. Figures are printed,
// never asserted; any error exits non-zero.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/aegislab/aegis/bench/plot"
	redisbench "github.com/aegislab/aegis/bench/redis"
	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
	"github.com/aegislab/aegis/internal/testing/servers"
)

func main() {
	if err := compare(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

type options struct {
	rounds      int
	round       time.Duration
	goroutines  []int
	contend     int
	contenders  string
	subjects    string
	handoffs    int
	handoffMax  time.Duration
	private     bool
	md, png     string
	commandLine string
}

func compare() error {
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "rounds of acquire+release")
	flag.DurationVar(&o.round, "round", time.Second, "time per subject per round")
	goroutines := flag.String("goroutines", "1,16", "goroutine counts of acquire+release, comma-separated (empty: none)")
	flag.IntVar(&o.contend, "contend", 8, "goroutines contending for the handoff key")
	flag.StringVar(&o.contenders, "contenders", "", "handoff contenders to run, by id, comma-separated (default: all; \"none\": none)")
	flag.StringVar(&o.subjects, "subjects", "", "acquire+release subjects to run, by id, comma-separated (default: all): redislease, raw, bsm, redsync1, redlock5, redsync5")
	flag.IntVar(&o.handoffs, "handoffs", 300, "handoffs per contender")
	flag.DurationVar(&o.handoffMax, "handoff-max", 15*time.Second, "longest time per contender")
	flag.BoolVar(&o.private, "private", false, "start six private Redis servers (no persistence) instead of AEGIS_REDIS_ADDRS")
	flag.StringVar(&o.md, "md", "", "write the report as a Markdown fragment to this file")
	flag.StringVar(&o.png, "png", "", "write redis-acquire-release.png to this directory")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if o.goroutines, err = measure.ParseCounts(*goroutines); err != nil {
		return err
	}
	switch {
	case o.rounds < 1:
		return fmt.Errorf("-rounds %d: at least 1", o.rounds)
	case o.round <= 0:
		return fmt.Errorf("-round %s: must be positive", o.round)
	case o.contend < 2:
		return fmt.Errorf("-contend %d: a handoff needs at least 2 goroutines", o.contend)
	case o.handoffs < 1:
		return fmt.Errorf("-handoffs %d: at least 1", o.handoffs)
	}
	o.commandLine = "cd bench && go run ./redis/compare " + strings.Join(os.Args[1:], " ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.private {
		dir, err := os.MkdirTemp("", "aegis-bench-redis")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		var addrs []string
		for i := range 6 {
			r, err := servers.StartRedis(ctx, filepath.Join(dir, fmt.Sprint("redis-", i)), nil)
			if err != nil {
				return err
			}
			defer r.Stop()
			addrs = append(addrs, r.Addr())
		}
		os.Setenv("AEGIS_REDIS_ADDRS", strings.Join(addrs, ","))
	}
	return run(ctx, o)
}

type tally struct {
	rec            latency.Recorder
	ops            int
	elapsed        time.Duration
	client, server time.Duration // CPU used
}

func (t *tally) opsPerSec() float64 { return float64(t.ops) / t.elapsed.Seconds() }

func run(ctx context.Context, o options) error {
	srv, err := redisbench.ServersFromEnv()
	if err != nil {
		return err
	}
	env := redisbench.NewEnv(srv)
	defer env.Close()
	var head, out strings.Builder // the sentence and load averages; the tables
	start := measure.Loadavg()
	host, _ := os.Hostname()
	where := "the shared servers of AEGIS_REDIS_ADDRS"
	if o.private {
		where = "six private Redis servers started by the command (no persistence)"
	}
	fmt.Fprintf(&head, "Measured with `%s`: %d rounds of %s per subject, subjects interleaved in a rotating order, on %s (%s single, five Redlock nodes); %d CPUs (%s), %s.\n\n",
		strings.TrimSpace(o.commandLine), o.rounds, o.round, where, srv.Single, runtime.NumCPU(), host, runtime.Version())
	fmt.Print(head.String())
	fmt.Printf("Load average (/proc/loadavg) at start: `%s`.\n\n", start)
	emit := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		out.WriteString(s)
		fmt.Print(s)
	}

	var subjects []redisbench.Subject
	for _, s := range env.Subjects() {
		if o.subjects == "" || slices.Contains(strings.Split(o.subjects, ","), s.ID) {
			subjects = append(subjects, s)
		}
	}
	if len(subjects) == 0 && len(o.goroutines) > 0 {
		return fmt.Errorf("-subjects %q: no such subject", o.subjects)
	}
	throughput := map[string][]float64{} // by subject ID, one per goroutine count
	var targets []string
	if len(o.goroutines) > 0 {
		emit("| lock | nodes | goroutines | acquire+release/s | p50 µs | p99 µs | client CPU µs/op | Redis CPU µs/op | ratio aegis/peer |\n")
		emit("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	}
	for _, n := range o.goroutines {
		ops := make([]redisbench.Op, len(subjects))
		for i, s := range subjects {
			if ops[i], err = s.New(n); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
		}
		tallies := make([]tally, len(subjects))
		for r := range o.rounds {
			for j := range subjects {
				i := (j + r) % len(subjects)
				s0, err := env.ServerCPU(ctx, subjects[i].Nodes)
				if err != nil {
					return err
				}
				c0 := measure.ProcessCPU()
				k, d, err := redisbench.Measure(ctx, ops[i], n, o.round, &tallies[i].rec)
				if err != nil {
					return fmt.Errorf("%s, %d goroutines: %w", subjects[i].Name, n, err)
				}
				c1 := measure.ProcessCPU()
				s1, err := env.ServerCPU(ctx, subjects[i].Nodes)
				if err != nil {
					return err
				}
				tallies[i].ops += k
				tallies[i].elapsed += d
				tallies[i].client += c1 - c0
				tallies[i].server += s1 - s0
			}
		}
		byID := map[string]*tally{}
		for i, s := range subjects {
			byID[s.ID] = &tallies[i]
			throughput[s.ID] = append(throughput[s.ID], tallies[i].opsPerSec())
		}
		// ratios are those of the pairs of subjects that ran (-subjects).
		ratioOf := func(a, b string) (float64, bool) {
			ta, tb := byID[a], byID[b]
			if ta == nil || tb == nil {
				return 0, false
			}
			return ta.opsPerSec() / tb.opsPerSec(), true
		}
		ratios := func(a string, peers ...string) []string {
			var r []string
			for _, b := range peers {
				if x, ok := ratioOf(a, b); ok {
					r = append(r, fmt.Sprintf("%.2f× %s", x, nameOf(subjects, b)))
				}
			}
			return r
		}
		for i, s := range subjects {
			var r []string
			switch s.ID {
			case "redislease":
				r = ratios("redislease", "raw", "bsm", "redsync1")
			case "redlock5":
				r = ratios("redlock5", "redsync5")
			}
			t := &tallies[i]
			server := "–" // shared servers: other programs' load
			if o.private {
				server = fmt.Sprintf("%.1f", us(t.server)/float64(t.ops))
			}
			emit("| %s | %d | %d | %.0f | %.0f | %.0f | %.1f | %s | %s |\n", s.Name, s.Nodes, n, t.opsPerSec(),
				us(t.rec.Percentile(50)), us(t.rec.Percentile(99)), us(t.client)/float64(t.ops), server, strings.Join(r, ", "))
		}
		raw, okRaw := ratioOf("redislease", "raw")
		bsm, okBSM := ratioOf("redislease", "bsm")
		rs, okRS := ratioOf("redislease", "redsync1")
		switch {
		case n == 16 && okRaw && okBSM:
			targets = append(targets, fmt.Sprintf("- redislease at 16 goroutines: %.2f× raw go-redis (target ≥ 0.90: %s) and %.2f× bsm/redislock (target ≥ 1.00: %s).",
				raw, verdict(raw >= 0.9), bsm, verdict(bsm >= 1.0)))
		case n == 1 && okRS:
			targets = append(targets, fmt.Sprintf("- redislease at 1 goroutine: %.2f× redsync (target ≥ 1.00: %s).", rs, verdict(rs >= 1.0)))
		}
		if r, ok := ratioOf("redlock5", "redsync5"); ok {
			targets = append(targets, fmt.Sprintf("- redlock (5 nodes) at %d goroutines: %.2f× redsync (5 nodes) (target ≥ 1.00: %s).", n, r, verdict(r >= 1.0)))
		}
	}

	p50, p99 := map[string]time.Duration{}, map[string]time.Duration{}
	contenders := env.Contenders()
	var picked []redisbench.Contender
	for _, c := range contenders {
		if o.contenders == "" || slices.Contains(strings.Split(o.contenders, ","), c.ID) {
			picked = append(picked, c)
		}
	}
	if len(picked) > 0 {
		emit("\nHandoff: %d goroutines contend for one key, each holding it for %s ±50%%; from the start of a release to the return of the next holder's acquire (%d handoffs each, at most %s each). Ratio: this lock's p50 over the peer's (lower is faster).\n\n",
			o.contend, redisbench.Hold, o.handoffs, o.handoffMax)
		emit("| lock | waiting | handoffs | p50 ms | p99 ms | p50 ratio aegis/peer |\n")
		emit("|---|---|---:|---:|---:|---|\n")
	}
	type row struct {
		c        redisbench.Contender
		n        int
		p50, p99 time.Duration
	}
	var rows []row
	for i, c := range picked {
		acquire, err := c.New(env.Key(fmt.Sprint("handoff-", i)))
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		var rec latency.Recorder
		hctx, cancel := context.WithTimeout(ctx, o.handoffMax)
		n, err := redisbench.Handoff(hctx, acquire, o.contend, o.handoffs, redisbench.Hold, &rec)
		cancel()
		if err != nil {
			return fmt.Errorf("handoff %s: %w", c.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("handoff %s: no handoff within %s", c.Name, o.handoffMax)
		}
		rows = append(rows, row{c, n, rec.Percentile(50), rec.Percentile(99)})
		p50[c.ID] = rec.Percentile(50)
		p99[c.ID] = rec.Percentile(99)
	}
	for _, r := range rows {
		var ratios []string
		for _, peer := range peersOf(r.c) {
			if d, ok := p50[peer]; ok {
				ratios = append(ratios, fmt.Sprintf("%.3f× %s", float64(r.p50)/float64(d), labelOf(contenders, peer)))
			}
		}
		emit("| %s | %s | %d | %.2f | %.2f | %s |\n", r.c.Name, r.c.Waiting, r.n, ms(r.p50), ms(r.p99), strings.Join(ratios, ", "))
	}
	if d, ok := p50["pglease"]; ok {
		p99 := p99["pglease"]
		line := fmt.Sprintf("- pglease contended handoff p50 %.2f ms (target < 2 ms: %s), p99 %.2f ms (target < 10 ms: %s)",
			ms(d), verdict(d < 2*time.Millisecond), ms(p99), verdict(p99 < 10*time.Millisecond))
		if r, ok := p50["redislease"]; ok {
			line += fmt.Sprintf(", beside redislease's %.2f ms", ms(r))
		}
		targets = append(targets, line+".")
	}
	end := measure.Loadavg()
	fmt.Printf("\nLoad average (/proc/loadavg) at end: `%s`.\n", end)
	if len(targets) > 0 {
		emit("\n%s\n", strings.Join(targets, "\n"))
	}
	if o.md != "" {
		fmt.Fprintf(&head, "Load average (/proc/loadavg) at start: `%s`; at end: `%s`.\n\n", start, end)
		if err := os.WriteFile(o.md, []byte(head.String()+out.String()), 0o644); err != nil {
			return err
		}
	}
	if o.png != "" && len(o.goroutines) > 0 {
		xs := make([]float64, len(o.goroutines))
		for i, n := range o.goroutines {
			xs[i] = float64(n)
		}
		chart := plot.Chart{Title: "Redis locks: acquire+release per second (one run, interleaved rounds)", X: "goroutines", Y: "acquire+release/s", LogX: true}
		for _, s := range subjects {
			name, _, _ := strings.Cut(s.Name, " (SET")
			chart.Series = append(chart.Series, plot.Series{Name: name, X: xs, Y: throughput[s.ID]})
		}
		if err := os.MkdirAll(o.png, 0o755); err != nil {
			return err
		}
		if err := plot.Save(chart, filepath.Join(o.png, "redis-acquire-release.png"), 7*vg.Inch, 4.5*vg.Inch); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return errors.New("interrupted")
	}
	return nil
}

// peersOf are the contenders an Aegis contender's handoff is compared
// with: the other libraries on as many nodes.
func peersOf(c redisbench.Contender) []string {
	switch c.ID {
	case "redislease", "pglease", "sqlitelease":
		return []string{"bsm-linear100ms", "bsm-exp16ms", "redsync1"}
	case "redlock5":
		return []string{"redsync5"}
	}
	return nil
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

func labelOf(cs []redisbench.Contender, id string) string {
	switch id {
	case "bsm-linear100ms":
		return "bsm (linear 100ms)"
	case "bsm-exp16ms":
		return "bsm (exponential 16ms)"
	}
	for _, c := range cs {
		if c.ID == id {
			return c.Name
		}
	}
	return id
}

func nameOf(subjects []redisbench.Subject, id string) string {
	for _, s := range subjects {
		if s.ID == id {
			name, _, _ := strings.Cut(s.Name, " (SET")
			return name
		}
	}
	return id
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
func ms(d time.Duration) float64 { return float64(d) / 1e6 }
