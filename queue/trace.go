package queue

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/tracing"
)

// The client's spans (Config.TracerProvider). Every one is made only when
// the client has a tracer: an untraced client checks a nil field and
// nothing more.
//
// A claim's span is recorded after the claim, from its start, only when it
// claimed a job or failed: an idle queue polled every PollInterval leaves
// no trace. Each job's run starts a trace of its own, linked to the span
// of the claim that got it (a claim serves many jobs, and a job's trace
// should not be a claim's); the writes of its outcome are children of its
// run's span.

// scopeName is the instrumentation scope of the queue's spans.
const scopeName = "github.com/aegislab/aegis/queue"

// traceClaim records the span of a claim of the queue that began at
// start and got n jobs or err, and returns its span context (invalid when
// nothing was recorded).
func (c *Client) traceClaim(queue string, start time.Time, n int, err error) trace.SpanContext {
	if n == 0 && err == nil {
		return trace.SpanContext{}
	}
	_, span := c.tracer.Start(context.Background(), "aegis.queue.claim", trace.WithTimestamp(start),
		trace.WithAttributes(tracing.AttrQueue.String(queue), tracing.Node(c.cfg.ID), tracing.AttrClaimed.Int(n)))
	tracing.Fail(span, err)
	span.End()
	return span.SpanContext()
}

// jobAttrs are what every span of job j says of it.
func (c *Client) jobAttrs(j *JobRow, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		tracing.AttrQueue.String(j.Queue),
		tracing.AttrKind.String(j.Kind),
		tracing.AttrJobID.Int64(j.ID),
		tracing.Token(j.Token),
		tracing.AttrAttempt.Int(j.Attempt),
		tracing.Node(c.cfg.ID),
	}, more...)
}

// startWork starts r's work span, a new trace linked to its claim's, and
// returns the handler's context, which carries it.
func (c *Client) startWork(r *run) context.Context {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(c.jobAttrs(r.row)...)}
	if r.claim.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: r.claim}))
	}
	ctx, span := c.tracer.Start(r.ctx, "aegis.queue.work", opts...)
	r.span = span
	return ctx
}

// endWork ends a work span with the handler's err: a failure, unless it
// asked for a snooze.
func endWork(span trace.Span, err error) {
	if _, snoozed := errors.AsType[*snoozeError](err); !snoozed {
		tracing.Fail(span, err)
	}
	span.End()
}

// traceWrite records the span of the write of r's outcome op (complete,
// retry, snooze, cancel, discard) that began at start and ends now, with
// werr: a child of r's work span. batch is the completions written in the
// same statement, 0 for a statement of its own.
func (c *Client) traceWrite(r *run, op string, start time.Time, batch int, werr error) {
	var more []attribute.KeyValue
	if batch > 0 {
		more = append(more, tracing.AttrBatch.Int(batch))
	}
	ctx := context.Background()
	if r.span != nil {
		ctx = trace.ContextWithSpan(ctx, r.span)
	}
	_, span := c.tracer.Start(ctx, "aegis.queue."+op, trace.WithTimestamp(start), trace.WithAttributes(c.jobAttrs(r.row, more...)...))
	endWrite(span, r.row.Token, werr)
}

// startCompleteTx starts the span of CompleteTx, a child of ctx's (the
// handler's: its work span).
func (c *Client) startCompleteTx(ctx context.Context, r *run) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, "aegis.queue.complete", trace.WithAttributes(c.jobAttrs(r.row, tracing.AttrInTx.Bool(true))...))
}

// endWrite records a fenced write's err on span and ends it: a refusal
// (the job's token moved on; the one the row holds now is not read) as
// the event aegis.fence.refused.
func endWrite(span trace.Span, token aegis.Token, err error) {
	if errors.Is(err, aegis.ErrStale) {
		tracing.Refused(span, token, 0)
	} else {
		tracing.Fail(span, err)
	}
	span.End()
}
