// Command leasehistory measures what the grant history (Config.History of
// pglease and sqlitelease) costs: one TryAcquire plus one Release of a
// free key, with History 0 and with History N, in the same run.
//
//	cd bench && go run ./leasehistory [-rounds 10] [-round 1s] [-history 10] [-goroutines 1]
//
// Each round runs every subject for -round, in an order that alternates
// between rounds, so that load from elsewhere on the machine falls on both
// alike. Every goroutine reuses one key, so that with History N each grant
// is in the steady state the history is built for: it inserts one row and
// deletes one. PostgreSQL is AEGIS_POSTGRES_URL (a schema of its own,
// dropped at the end); SQLite is a file in a temporary directory. It
// prints, per backend, the pairs per second and the latency of a pair per
// subject, the ratio with History over without (of the means, and the
// median of the rounds' ratios), and /proc/loadavg at the start and the
// end. Figures are printed, never asserted.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "leasehistory:", err)
		os.Exit(1)
	}
}

type options struct {
	rounds, history, goroutines int
	round                       time.Duration
	backends                    []string
}

func run() error {
	var o options
	flag.IntVar(&o.rounds, "rounds", 10, "rounds")
	flag.DurationVar(&o.round, "round", time.Second, "time per subject per round")
	flag.IntVar(&o.history, "history", 10, "Config.History of the subject with history")
	flag.IntVar(&o.goroutines, "goroutines", 1, "goroutines per subject, each on a key of its own")
	backends := flag.String("backends", "pglease,sqlitelease", "backends to measure, comma-separated")
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	case o.rounds < 1:
		return fmt.Errorf("-rounds %d: at least 1", o.rounds)
	case o.round <= 0:
		return fmt.Errorf("-round %s: must be positive", o.round)
	case o.history < 1:
		return fmt.Errorf("-history %d: at least 1", o.history)
	case o.goroutines < 1:
		return fmt.Errorf("-goroutines %d: at least 1", o.goroutines)
	}
	o.backends = strings.Split(*backends, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("cd bench && go run ./leasehistory %s\n\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("Load average (/proc/loadavg) at the start: `%s`.\n\n", loadavg())
	for _, b := range o.backends {
		var err error
		switch b {
		case "pglease":
			err = measurePG(ctx, o)
		case "sqlitelease":
			err = measureSQLite(ctx, o)
		default:
			err = fmt.Errorf("-backends: unknown backend %q (pglease, sqlitelease)", b)
		}
		if err != nil {
			return err
		}
	}
	fmt.Printf("Load average at the end: `%s`.\n", loadavg())
	return nil
}

// subject is one Locker under measure.
type subject struct {
	name   string
	l      aegis.Locker
	rounds []result
}

type result struct {
	pairs   int
	elapsed time.Duration
	lat     []time.Duration
}

func measurePG(ctx context.Context, o options) error {
	url := os.Getenv("AEGIS_POSTGRES_URL")
	if url == "" {
		return fmt.Errorf("AEGIS_POSTGRES_URL is not set (eval \"$(scripts/services env)\")")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("AEGIS_POSTGRES_URL is not a PostgreSQL URL") // the URL may hold a password: not quoted
	}
	schema := fmt.Sprintf("aegis_bench_history_%d", os.Getpid())
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+ident+" CASCADE") }()
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = int32(max(4, 2*o.goroutines))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var subjects []*subject
	for _, h := range []int{0, o.history} {
		l, err := pglease.New(pool, &pglease.Config{Table: fmt.Sprintf("lease_h%d", h), History: h})
		if err != nil {
			return err
		}
		subjects = append(subjects, &subject{name: fmt.Sprintf("History %d", h), l: l})
	}
	return measure(ctx, "pglease (PostgreSQL, "+cfg.ConnConfig.Host+")", o, subjects)
}

func measureSQLite(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "aegis-bench-history")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var subjects []*subject
	for _, h := range []int{0, o.history} {
		// A file per subject: SQLite has one writer per database, and the
		// subjects must not wait on each other's checkpoints.
		db, err := sqlitelease.Open(filepath.Join(dir, fmt.Sprintf("h%d.db", h)))
		if err != nil {
			return err
		}
		defer func(db *sql.DB) { db.Close() }(db)
		l, err := sqlitelease.New(db, &sqlitelease.Config{History: h})
		if err != nil {
			return err
		}
		subjects = append(subjects, &subject{name: fmt.Sprintf("History %d", h), l: l})
	}
	return measure(ctx, "sqlitelease (a file on "+dir+")", o, subjects)
}

func measure(ctx context.Context, title string, o options, subjects []*subject) error {
	// Warm up: the tables' first grants, the history filled to N.
	for _, s := range subjects {
		if _, err := s.run(ctx, o.goroutines, 0, o.history+1); err != nil {
			return err
		}
	}
	for r := range o.rounds {
		order := slices.Clone(subjects)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			res, err := s.run(ctx, o.goroutines, o.round, 0)
			if err != nil {
				return err
			}
			s.rounds = append(s.rounds, res)
		}
	}
	fmt.Printf("### %s\n\n%d rounds of %s per subject, %d goroutine(s), one key each, acquire+release of a free key.\n\n", title, o.rounds, o.round, o.goroutines)
	fmt.Println("| subject | pairs/s | mean | p50 | p99 |")
	fmt.Println("|---|---:|---:|---:|---:|")
	means := map[*subject]time.Duration{}
	for _, s := range subjects {
		var all []time.Duration
		pairs, elapsed := 0, time.Duration(0)
		for _, r := range s.rounds {
			all = append(all, r.lat...)
			pairs += r.pairs
			elapsed += r.elapsed
		}
		slices.Sort(all)
		means[s] = mean(all)
		fmt.Printf("| %s | %.0f | %s | %s | %s |\n", s.name, float64(pairs)/elapsed.Seconds()*float64(o.goroutines), us(means[s]), us(pct(all, 0.50)), us(pct(all, 0.99)))
	}
	base, hist := subjects[0], subjects[1]
	var ratios, medians []float64
	for i := range base.rounds {
		ratios = append(ratios, float64(mean(hist.rounds[i].lat))/float64(mean(base.rounds[i].lat)))
		medians = append(medians, float64(median(hist.rounds[i].lat))/float64(median(base.rounds[i].lat)))
	}
	fmt.Print("\nThe rounds' ratios of p50s, in order:")
	for _, m := range medians {
		fmt.Printf(" %.2f", m)
	}
	fmt.Println(".")
	slices.Sort(ratios)
	slices.Sort(medians)
	fmt.Printf("Ratio %s / %s of the mean pair: %.2f (median of the rounds' ratios %.2f, range %.2f–%.2f); of the rounds' p50s: median %.2f, range %.2f–%.2f. Load average now: `%s`.\n\n",
		hist.name, base.name, float64(means[hist])/float64(means[base]), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1],
		medians[len(medians)/2], medians[0], medians[len(medians)-1], loadavg())
	return nil
}

// run does acquire+release pairs on goroutines keys of its own, for d or
// n pairs per goroutine, whichever is given.
func (s *subject) run(ctx context.Context, goroutines int, d time.Duration, n int) (result, error) {
	var mu sync.Mutex
	var res result
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench/%d", g)
			var lat []time.Duration
			var err error
			for i := 0; (n > 0 && i < n) || (n == 0 && time.Now().Before(stop)); i++ {
				t := time.Now()
				var lease *aegis.Lease
				if lease, err = s.l.TryAcquire(ctx, key, time.Minute); err != nil {
					break
				}
				if err = s.l.Release(ctx, lease); err != nil {
					break
				}
				lat = append(lat, time.Since(t))
			}
			mu.Lock()
			defer mu.Unlock()
			res.lat = append(res.lat, lat...)
			res.pairs += len(lat)
			first = cmp.Or(first, err)
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start) * time.Duration(goroutines)
	if first != nil {
		return res, fmt.Errorf("%s: %w", s.name, first)
	}
	return res, nil
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return pct(s, 0.5)
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond)) }

// loadavg is /proc/loadavg without its newline.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}
