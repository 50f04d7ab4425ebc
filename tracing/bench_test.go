package tracing_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/tracing"
)

// BenchmarkLocker is the wrapper's own cost, on the in-process Locker
// (no round trip to hide it): TryAcquire then Release of a free key, off,
// never sampled, and always sampled into a batch of an exporter that
// discards it. aegis bench lease --tracing measures it against a store.
func BenchmarkLocker(b *testing.B) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	always := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() {
		_ = never.Shutdown(context.Background())
		_ = always.Shutdown(context.Background())
	})
	for _, arm := range []struct {
		name string
		l    aegis.Locker
	}{
		{"off", tracing.Locker(memlease.New(), nil)},
		{"never", tracing.Locker(memlease.New(), never)},
		{"always", tracing.Locker(memlease.New(), always)},
	} {
		b.Run(arm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := arm.l.TryAcquire(b.Context(), "k", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := arm.l.Release(b.Context(), l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
