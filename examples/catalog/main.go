// Command catalog is one replica of a service that runs the schedules of
// an Aegis catalog (package schedule). Start it three times on one store,
// edit the schedules with `aegis schedule`, and each tick runs on exactly
// one replica, also while its spec changes:
//
//	export AEGIS_POSTGRES_URL=postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable
//	go run ./examples/catalog -node a &
//	go run ./examples/catalog -node b &
//	go run ./examples/catalog -node c -handlers none &   # runs nothing: `list` names it
//	aegis schedule put hello --every 2s --handler report --args '{"to":"world"}'
//	aegis schedule list
//
// The store is -store (a postgres:// URL or a SQLite file), else
// $AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH, as for the aegis CLI.
//
// On call: start the three with -metrics 127.0.0.1:9101 (9102, 9103), put
// a schedule whose run works a while, stop the replica that runs it past
// its lease, and see both attempts of the tick; put one whose handler no
// replica has, and see its missed ticks:
//
//	aegis schedule put nightly --every 20s --handler report --args '{"work":"6s"}' --lock-at-most-for 2s
//	kill -STOP <the pid of the replica that printed its run>; sleep 5; kill -CONT <it>
//	aegis schedule runs nightly        # attempt 1 refused, attempt 2 succeeded
//	aegis schedule put orphan --every 5s --handler nobody
//	aegis schedule runs orphan         # missed (unbound): no replica bound it
//	curl -s 127.0.0.1:9101/metrics | grep aegis_schedule_
//
// Two handlers: "echo" prints each run as a JSON line; "report" writes a
// row into catalog_report, fenced by the run's token, which is how a
// handler's side effect stays exactly-once when a run is retried after a
// crash. Every scheduler event is printed as a JSON line too.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "catalog:", err)
		os.Exit(1)
	}
}

func run() error {
	store := flag.String("store", "", "a postgres:// URL, or a SQLite file: PATH, sqlite://PATH or file:PATH (default $AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH)")
	node := flag.String("node", "", "this replica's name (default HOSTNAME-PID)")
	ns := flag.String("namespace", schedule.DefaultNamespace, "the catalog's namespace")
	handlers := flag.String("handlers", "echo,report", `the handlers this replica has, comma-separated, or "none"`)
	metricsAddr := flag.String("metrics", "", "serve the scheduler's Prometheus metrics on this address's /metrics (e.g. 127.0.0.1:9101)")
	flag.Parse()

	// Stop on SIGINT or SIGTERM: Stop below waits for the runs going.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	db, err := open(ctx, cmp.Or(*store, os.Getenv("AEGIS_POSTGRES_URL"), os.Getenv("AEGIS_SQLITE_PATH")))
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := schedule.NewStore(ctx, db, &schedule.StoreConfig{Namespace: *ns})
	if err != nil {
		return err
	}
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: *ns})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	s, err := schedule.New(&schedule.Config{Node: *node, Store: st, Catalog: cat, OnEvent: printEvent, Registerer: reg})
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, h := range strings.Split(*handlers, ",") {
		switch h = strings.TrimSpace(h); h {
		case "none", "":
		case "echo":
			err = s.Handle("echo", echo)
		case "report":
			if err = migrate(ctx, db); err == nil {
				err = s.Handle("report", func(ctx context.Context, args json.RawMessage) error { return report(ctx, db, args) })
			}
		default:
			err = fmt.Errorf("-handlers: unknown handler %q (known: echo, report, none)", h)
		}
		if err != nil {
			return err
		}
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	s.Stop()
	return nil
}

// serveMetrics serves reg's metrics on addr's /metrics until stop.
func serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// open connects to PostgreSQL (a postgres:// URL) or SQLite (a file path).
func open(ctx context.Context, store string) (*sql.DB, error) {
	if store == "" {
		return nil, errors.New("no store: set -store, $AEGIS_POSTGRES_URL or $AEGIS_SQLITE_PATH")
	}
	if !strings.HasPrefix(store, "postgres://") && !strings.HasPrefix(store, "postgresql://") {
		// As the aegis CLI reads --store: PATH, sqlite://PATH or file:PATH.
		path := strings.TrimPrefix(strings.TrimPrefix(store, "sqlite://"), "file:")
		if strings.Contains(path, "://") {
			return nil, errors.New("-store: want a postgres:// URL or a SQLite file (PATH, sqlite://PATH, file:PATH)")
		}
		return sqlitelease.Open(path)
	}
	db, err := sql.Open("pgx", store)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err) // pgx's errors name no password
	}
	return db, nil
}

// out prints one JSON object per line; the scheduler's goroutines share it.
var out = struct {
	sync.Mutex
	*json.Encoder
}{Encoder: json.NewEncoder(os.Stdout)}

func say(v any) {
	out.Lock()
	defer out.Unlock()
	_ = out.Encode(v)
}

func printEvent(e schedule.Event) {
	type line struct {
		Node   string `json:"node"`
		Kind   string `json:"kind"`
		Job    string `json:"job,omitempty"`
		Fire   string `json:"fire,omitempty"`
		Token  int64  `json:"token,omitempty"`
		Reason string `json:"reason,omitempty"`
		Err    string `json:"error,omitempty"`
	}
	l := line{Node: e.Node, Kind: string(e.Kind), Job: e.Job, Token: int64(e.Token), Reason: e.Reason}
	if !e.Fire.IsZero() {
		l.Fire = e.Fire.UTC().Format(time.RFC3339Nano)
	}
	if e.Err != nil {
		l.Err = e.Err.Error()
	}
	say(l)
}

// echo prints the run.
func echo(ctx context.Context, args json.RawMessage) error {
	r, _ := schedule.RunFrom(ctx)
	say(struct {
		Node    string          `json:"node"`
		Handler string          `json:"handler"`
		Name    string          `json:"name"`
		Fire    string          `json:"fire"`
		Token   int64           `json:"token"`
		Attempt int             `json:"attempt"`
		Args    json.RawMessage `json:"args"`
	}{r.Node, "echo", r.Job, r.Fire.UTC().Format(time.RFC3339Nano), int64(r.Token), r.Attempt, args})
	return nil
}

// The report handler's table. It works as written on PostgreSQL and SQLite.
const (
	reportTable  = `CREATE TABLE IF NOT EXISTS catalog_report (name text NOT NULL, fire text NOT NULL, token bigint NOT NULL, node text NOT NULL)`
	reportInsert = `INSERT INTO catalog_report (name, fire, token, node) VALUES ($1, $2, $3, $4)`
)

func migrate(ctx context.Context, db *sql.DB) error {
	if err := fence.MigrateSQL(ctx, db); err != nil {
		return err
	}
	// Replicas started together race to create it: PostgreSQL's IF NOT
	// EXISTS can still fail the loser (a duplicate pg_type row), whose
	// next try sees the table.
	var err error
	for range 3 {
		if _, err = db.ExecContext(ctx, reportTable); err == nil {
			return nil
		}
	}
	return err
}

// report records the run in catalog_report. The fence check and the insert
// commit together: a run whose token is lower than one the schedule's
// resource already accepted (a retried run's stale first attempt) gets
// aegis.ErrStale, and its insert is rolled back. Args {"work": "5s"} make
// it work that long first (until its context ends), long enough to stop
// its process mid-run (kill -STOP) and watch another replica take the
// tick over.
func report(ctx context.Context, db *sql.DB, args json.RawMessage) error {
	r, _ := schedule.RunFrom(ctx)
	var a struct {
		Work string `json:"work"`
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return fmt.Errorf("report: args: %w", err)
		}
	}
	if a.Work != "" {
		d, err := time.ParseDuration(a.Work)
		if err != nil {
			return fmt.Errorf("report: args: work: %w", err)
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fence.CheckSQL(ctx, tx, "catalog/"+r.Job, r.Token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, reportInsert, r.Job, r.Fire.UTC().Format(time.RFC3339Nano), int64(r.Token), r.Node); err != nil {
		return err
	}
	return tx.Commit()
}
