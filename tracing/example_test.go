package tracing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/tracing"
)

// The README's tracing example, on an empty database: a traced Locker
// under aegis.Hold, and a fenced write in the trace of the caller's span.
// Here the spans go to an in-memory exporter and are printed; yours go to
// the exporter of your TracerProvider (OTLP, …).
func ExampleLocker() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tp.Shutdown(ctx)

	if err := tracedExport(ctx, pool, tp); err != nil {
		fmt.Println(err)
		return
	}
	names := map[trace.SpanID]string{}
	for _, s := range exporter.GetSpans() {
		names[s.SpanContext.SpanID()] = s.Name
	}
	for _, s := range exporter.GetSpans() {
		parent := "a root"
		if s.Parent.IsValid() {
			parent = "a child of " + names[s.Parent.SpanID()]
		}
		var token, key string
		for _, kv := range s.Attributes {
			switch kv.Key {
			case tracing.AttrToken:
				token = " token " + kv.Value.String()
			case tracing.AttrKey:
				key = " key " + kv.Value.String()
			}
		}
		fmt.Printf("%s%s%s: %s\n", s.Name, key, token, parent)
	}
	// Output:
	// aegis.lease.wait key invoice-export/2026-10 token 1: a child of export
	// aegis.fence.check key invoice-export/2026-10 token 1: a child of export
	// aegis.lease.release key invoice-export/2026-10 token 1: a child of export
	// export: a root
}

// tracedExport is the README's tracing example, as it is printed there.
func tracedExport(ctx context.Context, pool *pgxpool.Pool, tp trace.TracerProvider) error {
	pl, err := pglease.New(pool, nil)
	if err != nil {
		return err
	}
	if err := fence.Migrate(ctx, pool); err != nil {
		return err
	}
	locker := tracing.Locker(pl, tp, tracing.Node("web-1")) // tp nil: pl itself, untraced

	ctx, span := tp.Tracer("billing").Start(ctx, "export")
	defer span.End()
	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 30*time.Second) // aegis.lease.wait; renewals: aegis.lease.renew
	if err != nil {
		return err
	}
	defer h.Release(ctx) // aegis.lease.release
	return pgx.BeginFunc(h.Context(), pool, func(tx pgx.Tx) error {
		return fence.CheckLease(h.Context(), tx, "invoice-export/2026-10", h.Lease()) // aegis.fence.check, or aegis.fence.refused
	})
}
