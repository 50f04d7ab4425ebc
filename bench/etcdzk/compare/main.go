// Command compare measures etcdlease (both modes) against etcd's
// concurrency.Mutex and zklease against go-zookeeper's zk.Lock in one run,
// on the shared servers, and prints Markdown tables with the ratios.
//
//	cd bench && go run ./etcdzk/compare [-rounds 10] [-round 1s] [-goroutines 1,16] [-md FILE]
//
// Each operation is one acquire plus one release of a free key, each
// goroutine on a key of its own. For each goroutine count the subjects run
// in rounds, each subject for -round per round in a rotating order, so
// that load from elsewhere on the machine falls on every subject alike; the
// figures add up all rounds. -md writes the same report to FILE.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/aegislab/aegis/bench/etcdzk"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
)

func main() {
	if err := compare(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func compare() error {
	rounds := flag.Int("rounds", 10, "rounds per goroutine count")
	round := flag.Duration("round", time.Second, "time per subject per round")
	goroutines := flag.String("goroutines", "1,16", "goroutine counts, comma-separated")
	md := flag.String("md", "", "also write the Markdown report to this file")
	flag.Parse()
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: at least 1", *rounds)
	}
	if *round <= 0 {
		return fmt.Errorf("-round %s: must be positive", *round)
	}
	counts, err := measure.ParseCounts(*goroutines)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var out bytes.Buffer
	w := io.MultiWriter(os.Stdout, &out)
	if err := run(ctx, w, *rounds, *round, counts); err != nil {
		return err
	}
	if *md != "" {
		return os.WriteFile(*md, out.Bytes(), 0o644)
	}
	return nil
}

// peers names, for each Aegis subject, the peers its ratios are taken
// against.
var peers = map[string][]string{
	"etcdlease":         {"mutex-session-per-op", "mutex-shared-session"},
	"etcdlease-session": {"mutex-shared-session", "mutex-session-per-op"},
	"zklease":           {"zk.Lock"},
}

func run(ctx context.Context, w io.Writer, rounds int, round time.Duration, counts []int) error {
	startLoad := measure.Loadavg()
	host, _ := os.Hostname()
	fmt.Fprintf(w, "`cd bench && go run ./etcdzk/compare -rounds %d -round %s -goroutines %s`: one acquire+release of a free key per operation, each goroutine on a key of its own, TTL %s, every subject on a client of its own against the shared etcd cluster (%s) and 3-server ZooKeeper ensemble (%s); subjects in %d rotating interleaved rounds of %s each; %d CPUs (%s), %s.\n\n",
		rounds, round, joinInts(counts), etcdzk.TTL, strings.Join(etcdzk.EtcdEndpoints(), ","), strings.Join(etcdzk.ZKServers(), ","),
		rounds, round, runtime.NumCPU(), host, runtime.Version())
	fmt.Fprintf(w, "Load average (/proc/loadavg) at the start: `%s`.\n\n", startLoad)

	subjects := etcdzk.Subjects()
	results := map[int]map[string]*measure.Tally{}
	for _, n := range counts {
		tallies, err := measureAll(ctx, subjects, n, rounds, round)
		if err != nil {
			return err
		}
		results[n] = map[string]*measure.Tally{}
		for i, s := range subjects {
			results[n][s.ID] = &tallies[i]
		}
	}

	name := map[string]string{}
	for _, s := range subjects {
		name[s.ID] = s.Name
	}
	fmt.Fprintln(w, "| lock | goroutines | acquire+release/s | p50 µs | p99 µs | client CPU µs/op | ratio (acquire+release/s) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	for _, n := range counts {
		for _, s := range subjects {
			t := results[n][s.ID]
			var ratios []string
			for _, p := range peers[s.ID] {
				ratios = append(ratios, fmt.Sprintf("%.2f× %s", t.OpsPerSec()/results[n][p].OpsPerSec(), name[p]))
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %s |\n", s.Name, n, t.OpsPerSec(),
				us(t.Rec.Percentile(50)), us(t.Rec.Percentile(99)), us(t.CPU)/float64(max(t.Ops, 1)), strings.Join(ratios, ", "))
		}
	}
	fmt.Fprintf(w, "\nLoad average at the end: `%s`.\n\n", measure.Loadavg())
	target := func(id, peer string) string {
		var parts []string
		for _, n := range counts {
			r := results[n][id].OpsPerSec() / results[n][peer].OpsPerSec()
			verdict := "met"
			if r < 1 {
				verdict = fmt.Sprintf("missed by %.0f%%", (1-r)*100)
			}
			parts = append(parts, fmt.Sprintf("%.2f× at %d (%s)", r, n, verdict))
		}
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "- Target etcdlease session mode ≥ 1.0× the shared-session Mutex: %s.\n", target("etcdlease-session", "mutex-shared-session"))
	fmt.Fprintf(w, "- Target zklease ≥ 1.0× zk.Lock: %s.\n", target("zklease", "zk.Lock"))
	fmt.Fprintf(w, "- etcdlease's default mode (an etcd lease per grant) against the session-per-lock Mutex, its like: %s.\n", target("etcdlease", "mutex-session-per-op"))
	return ctx.Err()
}

// measureAll runs every subject at n goroutines in rotating rounds.
func measureAll(ctx context.Context, subjects []etcdzk.Subject, n, rounds int, round time.Duration) ([]measure.Tally, error) {
	ms := make([]measure.Subject, len(subjects))
	for i, s := range subjects {
		op, closeFn, err := s.New(n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		defer closeFn()
		ms[i] = measure.Subject{Name: s.Name, Op: op}
	}
	return measure.Rounds(ctx, ms, n, rounds, round)
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
