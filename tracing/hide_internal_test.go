package tracing

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aegislab/aegis"
)

// TestFailHiding: an error whose text holds the lease's owner is recorded
// with the owner replaced, and still matches what it wrapped.
func TestFailHiding(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	const owner = "5e0f1c2a9b7d4e3f8a6b5c4d3e2f1a0b"
	err := fmt.Errorf("renew: owner %s refused: %w", owner, aegis.ErrLost)

	_, span := tp.Tracer("test").Start(t.Context(), "renew")
	failHiding(span, err, owner)
	span.End()

	s := rec.Ended()[0]
	require.Equal(t, "renew: owner [owner] refused: aegis: lease lost", s.Status().Description)
	require.Len(t, s.Events(), 1)
	for _, kv := range s.Events()[0].Attributes {
		require.NotContains(t, kv.Value.String(), owner, kv.Key)
	}
	require.ErrorIs(t, hidden{err, "x"}, aegis.ErrLost)
}
