package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/bench/plot"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
)

// point is one backend at one goroutine count, summed over rounds.
type point struct {
	rec     measure.Recorder
	ops     int
	errs    int // calls that failed (a store's timeout): counted, not fatal
	elapsed time.Duration
}

func (p *point) opsPerSec() float64 {
	if p.elapsed <= 0 {
		return 0
	}
	return float64(p.ops) / p.elapsed.Seconds()
}

func curves(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("curves", flag.ContinueOnError)
	list := fs.String("goroutines", "1,4,16,64,256", "goroutine counts, comma-separated")
	names := fs.String("backends", strings.Join(backend.Names(), ","), "backends, comma-separated")
	round := fs.Duration("round", time.Second, "time per backend per goroutine count per round")
	rounds := fs.Int("rounds", 2, "rounds")
	md := fs.String("md", "", "write the Markdown fragment to this file")
	pngDir := fs.String("png", "", "write lease-throughput.png and lease-p99.png into this folder")
	if err := fs.Parse(args); err != nil {
		return err
	}
	counts, err := intList(*list)
	if err != nil {
		return fmt.Errorf("-goroutines: %w", err)
	}
	backends := strings.Split(*names, ",")
	for _, b := range backends {
		if !slices.Contains(backend.Names(), b) {
			return fmt.Errorf("-backends: unknown backend %q (known: %s)", b, strings.Join(backend.Names(), ", "))
		}
	}
	if *rounds < 1 || *round <= 0 {
		return errors.New("-rounds and -round must be positive")
	}
	dir, err := os.MkdirTemp("", "aegis-report")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	servers := backend.FromEnv()
	servers.SQLitePath = filepath.Join(dir, "bench.db")

	lockers := map[string]aegis.Locker{}
	for _, b := range backends {
		l, closeFn, err := backend.Open(ctx, b, servers)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		defer closeFn()
		lockers[b] = l
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	startLoad := loadavg()
	fmt.Fprintf(os.Stderr, "curves: %d backends × %v goroutines × %d rounds of %s; load %s\n", len(backends), counts, *rounds, *round, startLoad)

	// A warm-up per backend, not counted: servers just started (a JVM, a
	// fresh etcd) are slow for their first seconds.
	for _, b := range backends {
		if err := measureLeases(ctx, lockers[b], 4, *round, fmt.Sprintf("aegis-report/%x/warm/%s/", tag, b), &point{}); err != nil {
			return fmt.Errorf("%s, warming up: %w", b, err)
		}
	}
	pts := map[string]map[int]*point{}
	for _, b := range backends {
		pts[b] = map[int]*point{}
		for _, n := range counts {
			pts[b][n] = &point{}
		}
	}
	step := 0
	for r := range *rounds {
		for _, n := range counts {
			// Rotate the order, so that no backend always runs first
			// (after a pause) or right after the heaviest.
			order := slices.Clone(backends)
			k := step % len(order)
			order = append(order[k:], order[:k]...)
			step++
			for _, b := range order {
				prefix := fmt.Sprintf("aegis-report/%x/%s/%d/%d/", tag, b, r, n)
				if err := measureLeases(ctx, lockers[b], n, *round, prefix, pts[b][n]); err != nil {
					return fmt.Errorf("%s at %d goroutines: %w", b, n, err)
				}
				fmt.Fprintf(os.Stderr, "  round %d %-9s %4d goroutines: %8.0f ops/s so far\n", r+1, b, n, pts[b][n].opsPerSec())
			}
		}
	}
	endLoad := loadavg()

	if *pngDir != "" {
		var thr, p99 []plot.Series
		for _, b := range backends {
			s := plot.Series{Name: b}
			q := plot.Series{Name: b}
			for _, n := range counts {
				p := pts[b][n]
				s.X, s.Y = append(s.X, float64(n)), append(s.Y, p.opsPerSec())
				q.X, q.Y = append(q.X, float64(n)), append(q.Y, float64(p.rec.Percentile(99))/1e3)
			}
			thr, p99 = append(thr, s), append(p99, q)
		}
		if err := plot.Save(plot.Chart{Title: "Leases: TryAcquire + Release of a free key", X: "goroutines", Y: "acquire+release/s", LogX: true, LogY: true, Series: thr},
			filepath.Join(*pngDir, "lease-throughput.png"), 7*vg.Inch, 4.5*vg.Inch); err != nil {
			return err
		}
		if err := plot.Save(plot.Chart{Title: "Leases: p99 of one acquire+release", X: "goroutines", Y: "p99 (ms)", LogX: true, LogY: true, Series: ms(p99)},
			filepath.Join(*pngDir, "lease-p99.png"), 7*vg.Inch, 4.5*vg.Inch); err != nil {
			return err
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "`go run ./report curves -goroutines %s -rounds %d -round %s` (in bench/): TryAcquire then Release of a free key, a key per goroutine, "+
		"each backend's Locker as `aegis bench lease` opens it, rounds rotating the backends' order. Load average %s at the start, %s at the end.\n\n", *list, *rounds, *round, startLoad, endLoad)
	header := func(what string) {
		fmt.Fprintf(&b, "| %s |", what)
		for _, n := range counts {
			fmt.Fprintf(&b, " %d |", n)
		}
		b.WriteString("\n|---|")
		for range counts {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
	}
	header("acquire+release/s at goroutines")
	for _, be := range backends {
		fmt.Fprintf(&b, "| %s |", be)
		for _, n := range counts {
			fmt.Fprintf(&b, " %s |", thousands(pts[be][n].opsPerSec()))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	header("p99 at goroutines")
	for _, be := range backends {
		fmt.Fprintf(&b, "| %s |", be)
		for _, n := range counts {
			fmt.Fprintf(&b, " %s |", duration(pts[be][n].rec.Percentile(99)))
		}
		b.WriteString("\n")
	}
	var failed []string
	for _, be := range backends {
		for _, n := range counts {
			if e := pts[be][n].errs; e > 0 {
				failed = append(failed, fmt.Sprintf("%s at %d goroutines %d of %d", be, n, e, e+pts[be][n].ops))
			}
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "\nCalls that failed (counted out of the figures; a store's timeout): %s.\n", strings.Join(failed, "; "))
	}
	if *pngDir != "" {
		b.WriteString("\n![lease throughput](lease-throughput.png)\n![lease p99](lease-p99.png)\n")
	}
	fmt.Print(b.String())
	if *md != "" {
		return os.WriteFile(*md, []byte(b.String()), 0o644)
	}
	return nil
}

// ms turns p99 series from µs into ms.
func ms(s []plot.Series) []plot.Series {
	for i := range s {
		for j := range s[i].Y {
			s[i].Y[j] /= 1e3
		}
	}
	return s
}

// measureLeases runs n goroutines of acquire+release for d, adding to p.
// A failed call is counted and its goroutine goes on with a new key (the
// old one may still be held); more failures than successes end the
// measure with the first error.
func measureLeases(ctx context.Context, l aegis.Locker, n int, d time.Duration, prefix string, p *point) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		ops, errs  int
		firstError error
	)
	start := time.Now()
	for g := range n {
		wg.Go(func() {
			done, failed, gen := 0, 0, 0
			key := prefix + strconv.Itoa(g)
			defer func() { mu.Lock(); ops += done; errs += failed; mu.Unlock() }()
			for ctx.Err() == nil {
				err := p.rec.Time(func() error {
					lease, err := l.TryAcquire(ctx, key, time.Minute)
					if err != nil {
						return err
					}
					return l.Release(ctx, lease)
				})
				switch {
				case err == nil:
					done++
				case ctx.Err() != nil:
					// The deadline cutting a call short is the round's end;
					// a lease left by it expires.
					return
				default:
					failed++
					mu.Lock()
					if firstError == nil {
						firstError = err
					}
					mu.Unlock()
					gen++
					key = fmt.Sprintf("%s%d.%d", prefix, g, gen)
				}
			}
		})
	}
	wg.Wait()
	p.elapsed += time.Since(start)
	p.ops += ops
	p.errs += errs
	if errs > ops {
		return fmt.Errorf("%d of %d calls failed, the first: %w", errs, ops+errs, firstError)
	}
	return nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// thousands prints 12345.6 as 12,346.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func duration(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}
