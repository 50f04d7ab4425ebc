// Command compare measures the Redis locks of package redisbench in one
// run, on the same servers, and prints Markdown tables with the ratios.
//
//	cd bench && go run ./redis/compare [-private] [-rounds 5] [-round 1s] [-handoffs 300]
//
// Acquire+release subjects run in rounds, each subject for -round per
// round in a rotating order, so that load from elsewhere on the machine
// falls on every subject alike; the figures add up all rounds. Handoff
// contenders run one after another, each until -handoffs handoffs (or
// -handoff-max passed). With -private it starts six Redis servers of its
// own, so that other programs using the shared ones do not disturb it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	redisbench "github.com/aegislab/aegis/bench/redis"
	"github.com/aegislab/aegis/internal/tool/latency"
	"github.com/aegislab/aegis/internal/tool/servers"
)

func main() {
	if err := compare(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func compare() error {
	rounds := flag.Int("rounds", 5, "rounds of acquire+release")
	round := flag.Duration("round", time.Second, "time per subject per round")
	goroutines := flag.String("goroutines", "1,16", "goroutine counts, comma-separated")
	contend := flag.Int("contend", 8, "goroutines contending for the handoff key")
	contenders := flag.String("contenders", "", "handoff contenders to run, by id, comma-separated (default: all)")
	handoffs := flag.Int("handoffs", 300, "handoffs per contender")
	handoffMax := flag.Duration("handoff-max", 20*time.Second, "longest time per contender")
	private := flag.Bool("private", false, "start six private Redis servers (no persistence) instead of AEGIS_REDIS_ADDRS")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *private {
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
	return run(ctx, *rounds, *round, *goroutines, *contenders, *contend, *handoffs, *handoffMax, *private)
}

type tally struct {
	rec            latency.Recorder
	ops            int
	elapsed        time.Duration
	client, server time.Duration // CPU used
}

func (t *tally) opsPerSec() float64 { return float64(t.ops) / t.elapsed.Seconds() }

func run(ctx context.Context, rounds int, round time.Duration, goroutines, contenders string, contend, handoffs int, handoffMax time.Duration, private bool) error {
	servers, err := redisbench.ServersFromEnv()
	if err != nil {
		return err
	}
	env := redisbench.NewEnv(servers)
	defer env.Close()
	host, _ := os.Hostname()
	fmt.Printf("Redis %s (single node) and %s (five Redlock nodes); %d CPUs (%s), %s; %d rounds of %s per subject.\n\n",
		servers.Single, strings.Join(servers.Nodes, ","), runtime.NumCPU(), host, runtime.Version(), rounds, round)

	subjects := env.Subjects()
	fmt.Println("| lock | nodes | goroutines | acquire+release/s | p50 µs | p99 µs | client CPU µs/op | Redis CPU µs/op | ratio |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, gs := range strings.FieldsFunc(goroutines, func(r rune) bool { return r == ',' }) {
		var n int
		if _, err := fmt.Sscan(gs, &n); err != nil || n < 1 {
			return fmt.Errorf("-goroutines: %q is not a positive count", gs)
		}
		ops := make([]redisbench.Op, len(subjects))
		for i, s := range subjects {
			if ops[i], err = s.New(n); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
		}
		tallies := make([]tally, len(subjects))
		for r := range rounds {
			for j := range subjects {
				i := (j + r) % len(subjects)
				s0, err := env.ServerCPU(ctx, subjects[i].Nodes)
				if err != nil {
					return err
				}
				c0 := redisbench.ProcessCPU()
				k, d, err := redisbench.Measure(ctx, ops[i], n, round, &tallies[i].rec)
				if err != nil {
					return fmt.Errorf("%s, %d goroutines: %w", subjects[i].Name, n, err)
				}
				c1 := redisbench.ProcessCPU()
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
		}
		ratio := func(a, b string) string {
			return fmt.Sprintf("%.2f× %s", byID[a].opsPerSec()/byID[b].opsPerSec(), nameOf(subjects, b))
		}
		for i, s := range subjects {
			var r []string
			switch s.ID {
			case "redislease":
				r = []string{ratio("redislease", "raw"), ratio("redislease", "bsm"), ratio("redislease", "redsync1")}
			case "redlock5":
				r = []string{ratio("redlock5", "redsync5")}
			}
			t := &tallies[i]
			server := "–" // shared servers: other programs' load
			if private {
				server = fmt.Sprintf("%.1f", us(t.server)/float64(t.ops))
			}
			fmt.Printf("| %s | %d | %d | %.0f | %.0f | %.0f | %.1f | %s | %s |\n", s.Name, s.Nodes, n, t.opsPerSec(),
				us(t.rec.Percentile(50)), us(t.rec.Percentile(99)), us(t.client)/float64(t.ops), server, strings.Join(r, ", "))
		}
	}

	fmt.Printf("\nHandoff: %d goroutines contend for one key, each holding it for %s ±50%%; from the start of a release to the next holder's acquire (%d handoffs each, at most %s).\n\n", contend, redisbench.Hold, handoffs, handoffMax)
	fmt.Println("| lock | waiting | handoffs | p50 ms | p99 ms |")
	fmt.Println("|---|---|---:|---:|---:|")
	for i, c := range env.Contenders() {
		if contenders != "" && !slices.Contains(strings.Split(contenders, ","), c.ID) {
			continue
		}
		acquire, err := c.New(env.Key(fmt.Sprint("handoff-", i)))
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		var rec latency.Recorder
		hctx, cancel := context.WithTimeout(ctx, handoffMax)
		n, err := redisbench.Handoff(hctx, acquire, contend, handoffs, redisbench.Hold, &rec)
		cancel()
		if err != nil {
			return fmt.Errorf("handoff %s: %w", c.Name, err)
		}
		fmt.Printf("| %s | %s | %d | %.2f | %.2f |\n", c.Name, c.Waiting, n, ms(rec.Percentile(50)), ms(rec.Percentile(99)))
	}
	return ctx.Err()
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
