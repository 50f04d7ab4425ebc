package fence

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/actor"
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
	ctx, span := parent.TracerProvider().Tracer(scopeName).Start(ctx, "aegis.fence.check")
	if span.IsRecording() {
		span.SetAttributes(tracing.Resource(resource), tracing.Token(token))
		span.SetAttributes(more...)
	}
	return ctx, span
}

// startExec starts the span of Exec or ExecSQL when ctx carries a span,
// as startCheck does: aegis.fence.exec, with the resource a refusal is
// named (ExecResource) and the token of the scheduled run of ctx, if any
// (the statement's token is an argument Exec cannot tell). They are set
// only on a span that records, so an unsampled Exec does not build them.
func startExec(ctx context.Context, statement string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, nil
	}
	ctx, span := parent.TracerProvider().Tracer(scopeName).Start(ctx, "aegis.fence.exec")
	if span.IsRecording() {
		span.SetAttributes(tracing.Resource(ExecResource(statement)))
		if w, ok := actor.From(ctx); ok {
			span.SetAttributes(tracing.Token(aegis.Token(w.Token)))
		}
	}
	return ctx, span
}

// endCheck records the outcome *err of a check (or an Exec) on span and
// ends it: a
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
