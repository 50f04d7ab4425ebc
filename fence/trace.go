package fence

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/tracing"
)

// scopeName is the instrumentation scope of the fence's spans.
const scopeName = "github.com/aegislab/aegis/fence"

// startCheck starts a check's span when ctx carries a span (see the
// package doc): a child of it, from its TracerProvider. Otherwise it
// returns ctx and nil, and the check costs one context lookup more.
func startCheck(ctx context.Context, resource string, token aegis.Token, more ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, nil
	}
	tracer := parent.TracerProvider().Tracer(scopeName)
	return tracing.Start(ctx, tracer, "aegis.fence.check", append([]attribute.KeyValue{tracing.Resource(resource), tracing.Token(token)}, more...)...)
}

// endCheck records the check's outcome *err on span and ends it: a
// refusal as the event aegis.fence.refused, another error as an error.
func endCheck(span trace.Span, err *error) {
	if span == nil {
		return
	}
	defer span.End()
	if se, ok := errors.AsType[*StaleError](*err); ok {
		tracing.Refused(span, se.Token, se.Held)
		return
	}
	tracing.Fail(span, *err)
}
