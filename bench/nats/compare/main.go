// Command compare measures natslease against the raw recipe a NATS user
// writes today (the bucket's Create to take a key, its Delete to release
// it: ShedLock's JetStream provider's approach) on the shared three-server
// cluster, and prints Markdown tables with the ratios.
//
//	cd bench && go run ./nats/compare [-rounds 10] [-round 1s] [-goroutines 1,16] [-contend 8] [-handoffs 300] [-md FILE]
//
// Acquire+release: each operation is one acquire plus one release of a
// free key, each goroutine on a key of its own; for each goroutine count
// the subjects run in rounds, each for -round per round in a rotating
// order, so that load from elsewhere falls on both alike. Handoff:
// -contend goroutines contend for one key (bench/redis's Handoff), each
// holding it for 5 ms ±50%; the latency is from the start of a release to
// the return of the next holder's acquire.
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

	natsbench "github.com/aegislab/aegis/bench/nats"
	redisbench "github.com/aegislab/aegis/bench/redis"
	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
)

type options struct {
	rounds, contend, handoffs int
	round, handoffMax         time.Duration
	goroutines                []int
}

func main() {
	if err := compare(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func compare() error {
	var o options
	flag.IntVar(&o.rounds, "rounds", 10, "rounds per goroutine count")
	flag.DurationVar(&o.round, "round", time.Second, "time per subject per round")
	goroutines := flag.String("goroutines", "1,16", "goroutine counts, comma-separated")
	flag.IntVar(&o.contend, "contend", 8, "goroutines contending for the handoff key")
	flag.IntVar(&o.handoffs, "handoffs", 300, "handoffs per subject")
	flag.DurationVar(&o.handoffMax, "handoff-max", 30*time.Second, "longest time per subject's handoffs")
	md := flag.String("md", "", "also write the Markdown report to this file")
	flag.Parse()
	switch {
	case o.rounds < 1:
		return fmt.Errorf("-rounds %d: at least 1", o.rounds)
	case o.round <= 0:
		return fmt.Errorf("-round %s: must be positive", o.round)
	case o.contend < 2:
		return fmt.Errorf("-contend %d: a handoff needs at least 2 goroutines", o.contend)
	case o.handoffs < 1:
		return fmt.Errorf("-handoffs %d: at least 1", o.handoffs)
	case o.handoffMax <= 0:
		return fmt.Errorf("-handoff-max %s: must be positive", o.handoffMax)
	}
	var err error
	if o.goroutines, err = measure.ParseCounts(*goroutines); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var out bytes.Buffer
	if err := run(ctx, io.MultiWriter(os.Stdout, &out), o, *goroutines); err != nil {
		return err
	}
	if *md != "" {
		return os.WriteFile(*md, out.Bytes(), 0o644)
	}
	return nil
}

func run(ctx context.Context, w io.Writer, o options, goroutines string) error {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "`cd bench && go run ./nats/compare -rounds %d -round %s -goroutines %s -contend %d -handoffs %d`: natslease against the raw recipe (`kv.Create` to take a key, `kv.Delete` to release it, on a bucket whose MaxAge is the TTL: ShedLock's JetStream provider expires a lock by its bucket's TTL, with no per-key TTL), both on buckets of %d replicas (file storage) of the shared NATS cluster (%s), each subject on a connection of its own; TTL %s; subjects in %d rotating interleaved rounds of %s each; %d CPUs (%s), %s.\n\n",
		o.rounds, o.round, goroutines, o.contend, o.handoffs, natsbench.Replicas, strings.Join(natsbench.URLs(), ","), natsbench.TTL,
		o.rounds, o.round, runtime.NumCPU(), host, runtime.Version())
	fmt.Fprintf(w, "Load average (/proc/loadavg) at the start: `%s`.\n\n", measure.Loadavg())
	subjects := natsbench.Subjects()
	fmt.Fprintln(w, "| lock | goroutines | acquire+release/s | p50 µs | p99 µs | client CPU µs/op | ratio natslease/raw (acquire+release/s) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	var refusals []string
	for _, n := range o.goroutines {
		before := natsbench.RawRefusals.Load()
		tallies, err := measureAll(ctx, subjects, n, o.rounds, o.round)
		if err != nil {
			return err
		}
		refusals = append(refusals, fmt.Sprintf("%d of %d operations with %d goroutine(s)", natsbench.RawRefusals.Load()-before, tallies[len(tallies)-1].Ops, n))
		for i, s := range subjects {
			t := &tallies[i]
			ratio := ""
			if s.ID == "natslease" {
				ratio = fmt.Sprintf("%.2f×", t.OpsPerSec()/tallies[len(tallies)-1].OpsPerSec())
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %s |\n", s.Name, n, t.OpsPerSec(),
				us(t.Rec.Percentile(50)), us(t.Rec.Percentile(99)), us(t.CPU)/float64(max(t.Ops, 1)), ratio)
		}
	}

	fmt.Fprintf(w, "\nThe raw recipe's Create refused its goroutine's own free key (its delete marker read by a direct get from a replica that had not applied the delete yet), and was tried again within the operation: %s.\n", strings.Join(refusals, ", "))
	fmt.Fprintf(w, "\nHandoff: %d goroutines contend for one key, each holding it for %s ±50%%; from the start of a release to the return of the next holder's acquire (%d handoffs each, at most %s each). natslease waits in aegis.Acquire, woken by the watch on the key that its Notify sets up for each wait (an ordered consumer); the raw recipe's goroutines each keep one watch on the key for the whole run and try Create again at each change. Ratio: natslease's p50 over the raw recipe's (lower is faster).\n\n",
		o.contend, redisbench.Hold, o.handoffs, o.handoffMax)
	fmt.Fprintln(w, "| lock | handoffs | p50 ms | p99 ms | p50 ratio natslease/raw |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|")
	p50 := make([]time.Duration, len(subjects))
	lines := make([]string, len(subjects))
	for i, s := range subjects {
		acquire, closeFn, err := s.Handoff("handoff/" + natsbench.Run())
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		var rec latency.Recorder
		hctx, cancel := context.WithTimeout(ctx, o.handoffMax)
		k, err := redisbench.Handoff(hctx, acquire, o.contend, o.handoffs, redisbench.Hold, &rec)
		cancel()
		closeFn()
		if err != nil {
			return fmt.Errorf("handoff %s: %w", s.Name, err)
		}
		if k == 0 {
			return fmt.Errorf("handoff %s: no handoff within %s", s.Name, o.handoffMax)
		}
		p50[i] = rec.Percentile(50)
		lines[i] = fmt.Sprintf("| %s | %d | %.2f | %.2f |", s.Name, k, ms(p50[i]), ms(rec.Percentile(99)))
	}
	for i, s := range subjects {
		ratio := ""
		if s.ID == "natslease" {
			ratio = fmt.Sprintf("%.2f×", float64(p50[i])/float64(p50[len(p50)-1]))
		}
		fmt.Fprintf(w, "%s %s |\n", lines[i], ratio)
	}
	fmt.Fprintf(w, "\nLoad average at the end: `%s`.\n\n", measure.Loadavg())
	return ctx.Err()
}

// measureAll runs every subject at n goroutines in rotating rounds.
func measureAll(ctx context.Context, subjects []natsbench.Subject, n, rounds int, round time.Duration) ([]measure.Tally, error) {
	ms := make([]measure.Subject, len(subjects))
	for i, s := range subjects {
		op, closeFn, err := s.New()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		defer closeFn()
		ms[i] = measure.Subject{Name: s.Name, Op: op}
	}
	return measure.Rounds(ctx, ms, n, rounds, round)
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
func ms(d time.Duration) float64 { return float64(d) / 1e6 }
