// Command jaeger runs a schedule whose runs export their traces over OTLP
// to Jaeger (or any OTLP over HTTP collector), then prints where to see
// them:
//
//	scripts/services start jaeger            # the first time, builds it (minutes)
//	cd examples/jaeger && go run .
//
// It exports to $OTEL_EXPORTER_OTLP_ENDPOINT, by default Jaeger's on
// loopback (http://127.0.0.1:4318), as the service "aegis-jaeger-example".
// A scheduler (run-key mode, a SQLite store in a file it keeps) runs the
// job "invoice-export" every second, -runs times; each run writes a row
// fenced by its token (fence.CheckSQL), so that its trace holds the run's
// span and its fence check. It prints each run's trace in Jaeger's UI
// ($AEGIS_JAEGER_QUERY_URL, by default http://127.0.0.1:16686) and the
// `aegis console` command that links the store's attempts to them. (A
// Jaeger built from its Go module, as scripts/services builds it, serves
// a placeholder page in place of its UI, whose assets are built apart:
// its query API has the trace, at /api/traces/ID.)
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

func main() {
	runs := flag.Int("runs", 3, "how many runs of the job before it stops")
	store := flag.String("store", "", "the SQLite file of the schedule's store (default: a new one in $TMPDIR, kept)")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	o := options{
		endpoint: cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "http://127.0.0.1:4318"),
		ui:       strings.TrimSuffix(cmp.Or(os.Getenv("AEGIS_JAEGER_QUERY_URL"), "http://127.0.0.1:16686"), "/"),
		store:    *store,
		runs:     *runs,
	}
	if err := run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "jaeger:", err)
		os.Exit(1)
	}
}

// options are the example's settings.
type options struct {
	endpoint string // where spans go: an OTLP over HTTP URL
	ui       string // Jaeger's UI, for the links printed
	store    string // the SQLite file; "" is a new one
	runs     int
}

// service is the name the example's spans are exported under.
const service = "aegis-jaeger-example"

// run runs the job o.runs times, exporting each run's trace, and prints
// their links to w.
func run(ctx context.Context, w io.Writer, o options) error {
	if o.runs < 1 {
		return fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	if o.store == "" {
		dir, err := os.MkdirTemp("", "aegis-jaeger-example-")
		if err != nil {
			return err
		}
		o.store = filepath.Join(dir, "aegis.db")
	}
	// The exporter's own client, whose connections the shutdown below
	// closes (the exporter's Shutdown leaves them open).
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimSuffix(o.endpoint, "/")+"/v1/traces"), otlptracehttp.WithHTTPClient(hc))
	if err != nil {
		return fmt.Errorf("OTLP exporter to %s: %w", o.endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	// Shutdown flushes the spans not yet sent: without it the last runs'
	// spans are lost when the program exits.
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}()

	db, err := sqlitelease.Open(o.store)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := schedule.NewStore(ctx, db, nil)
	if err != nil {
		return err
	}
	if err := fence.MigrateSQL(ctx, db); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS invoice_export (token INTEGER NOT NULL, at TEXT NOT NULL)`); err != nil {
		return err
	}
	s, err := schedule.New(&schedule.Config{Store: st, TracerProvider: tp})
	if err != nil {
		return err
	}
	done := make(chan struct{}, o.runs)
	err = s.Add(schedule.Job{Name: "invoice-export", Every: time.Second, Run: func(ctx context.Context) error {
		token, _ := schedule.TokenFrom(ctx)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// The fence refuses a run whose tick a later run took over.
		if err := fence.CheckSQL(ctx, tx, "invoice-export", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO invoice_export (token, at) VALUES (?, ?)`, int64(token), time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		select {
		case done <- struct{}{}:
		default:
		}
		return nil
	}})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(w, "exporting to %s as service %q; %d runs of invoice-export, one a second\n", o.endpoint, service, o.runs)
	for range o.runs {
		select {
		case <-done:
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-time.After(30 * time.Second):
			s.Stop()
			return errors.New("no run within 30s")
		}
	}
	s.Stop() // waits for the runs: their spans have ended
	if err := tp.ForceFlush(ctx); err != nil {
		return fmt.Errorf("export the spans to %s: %w", o.endpoint, err)
	}

	reader, err := schedule.NewRunReader(ctx, db, nil)
	if err != nil {
		return err
	}
	as, err := reader.Attempts(ctx, "invoice-export", o.runs)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nthe runs' traces in Jaeger's UI (%s, service %s):\n", o.ui, service)
	slices.Reverse(as) // oldest first
	for _, a := range as {
		fmt.Fprintf(w, "  %s  token %d  %-9s  %s/trace/%s\n", a.Fire.UTC().Format(time.TimeOnly), a.Token, a.Outcome, o.ui, a.TraceID)
	}
	fmt.Fprintf(w, "(a Jaeger built from its Go module, as scripts/services builds it, has no UI there but a placeholder page: the same trace's JSON is at %s/api/traces/ID)\n", o.ui)
	fmt.Fprintf(w, "\nthe console, linking each attempt to its trace:\n  aegis console --store %s --trace-url '%s/trace/%s'\n", o.store, o.ui, console.TracePlaceholder)
	return nil
}
