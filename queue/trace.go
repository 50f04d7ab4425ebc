package queue

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/tracing"
)

// The client's spans (Config.TracerProvider). Every one is made only when
// the client has a tracer: an untraced client checks a nil field and
// nothing more. Their attributes are set only on a span that records: a
// span its sampler dropped costs its start and end, not the attributes
// (so a sampler sees a span's name and parent, not its attributes:
// docs/decisions.md).
//
// An enqueue is a span (aegis.queue.enqueue), and the enqueuer's trace
// context, the enqueue span's or, for an untraced client, the caller's
// ctx's, is stored with each job as a W3C traceparent. The first attempt
// of the job runs as its child: one trace from the enqueuing request to
// the work. A later attempt (a retry, a reclaim) starts a trace of its
// own linked to it, since it may come hours later and a poison job's
// retries would fill the enqueuer's trace. Every run is also linked to the
// span of the claim that got it (a claim serves many jobs); the writes of
// its outcome are children of its run's span.
//
// A claim's span is recorded after the claim, from its start, only when it
// claimed a job or failed: an idle queue polled every PollInterval leaves
// no trace. Likewise a heartbeat is a span only when it failed or lost a
// lease, and the reaper's pass only when it did work.

// scopeName is the instrumentation scope of the queue's spans.
const scopeName = "github.com/aegislab/aegis/queue"

// traceClaim records the span of a claim of the queue that began at
// start and got n jobs or err, and returns its span context (invalid when
// nothing was recorded).
func (c *Client) traceClaim(queue string, start time.Time, n int, err error) trace.SpanContext {
	if n == 0 && err == nil {
		return trace.SpanContext{}
	}
	_, span := c.tracer.Start(context.Background(), "aegis.queue.claim", trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrQueue.String(queue), tracing.Node(c.cfg.ID), tracing.AttrClaimed.Int(n))
		tracing.Fail(span, err)
	}
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

// startWork starts r's work span and returns the handler's context, which
// carries it. The first attempt of a job enqueued under a trace is a child
// of the enqueuer's span; any other run starts a trace of its own, linked
// to the enqueuer's span when there is one. Every run is linked to its
// claim's span.
func (c *Client) startWork(r *run) context.Context {
	links := make([]trace.Link, 0, 2)
	if r.claim.IsValid() {
		links = append(links, trace.Link{SpanContext: r.claim})
	}
	ctx := r.ctx
	opts := make([]trace.SpanStartOption, 0, 2)
	switch parent := enqueuer(r.row.traceparent); {
	case parent.IsValid() && r.row.Attempt == 1:
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	default:
		opts = append(opts, trace.WithNewRoot())
		if parent.IsValid() {
			links = append(links, trace.Link{SpanContext: parent})
		}
	}
	ctx, span := c.tracer.Start(ctx, "aegis.queue.work", append(opts, trace.WithLinks(links...))...)
	if span.IsRecording() {
		span.SetAttributes(c.jobAttrs(r.row)...)
	}
	r.span = span
	return ctx
}

// traceparentHeader is the W3C Trace Context header a job stores.
const traceparentHeader = "traceparent"

// carrier holds one traceparent for OpenTelemetry's W3C propagator
// (propagation.TraceContext), which writes and parses it; the tracestate
// is not kept.
type carrier struct{ traceparent string }

func (c *carrier) Get(key string) string {
	if key == traceparentHeader {
		return c.traceparent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == traceparentHeader {
		c.traceparent = value
	}
}

func (c *carrier) Keys() []string { return []string{traceparentHeader} }

// traceparentOf is the traceparent of ctx's span, "" when ctx carries none
// (a span that was not sampled has one too: its flags say so, and the
// work's sampler follows them).
func traceparentOf(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	return c.traceparent
}

// enqueuer parses a stored traceparent: the span context of the job's
// enqueuer, invalid when there is none or it does not parse (it is then
// ignored: the job runs as one enqueued untraced).
func enqueuer(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	c := carrier{traceparent}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &c))
}

// startEnqueue starts the span of an enqueue when the client traces: of
// one job (in) or of a batch of n. It returns ctx and nil otherwise.
func (c *Client) startEnqueue(ctx context.Context, in *insert, n int) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, nil
	}
	ctx, span := c.tracer.Start(ctx, "aegis.queue.enqueue")
	if span.IsRecording() {
		if in != nil {
			span.SetAttributes(tracing.AttrQueue.String(in.queue), tracing.AttrKind.String(in.kind), tracing.Node(c.cfg.ID))
		} else {
			span.SetAttributes(tracing.AttrBatch.Int(n), tracing.Node(c.cfg.ID))
		}
	}
	return ctx, span
}

// endEnqueue records the outcome of an enqueue of one job (res, nil for a
// batch) on span, if any, and ends it.
func endEnqueue(span trace.Span, res *Enqueued, err error) {
	if span == nil {
		return
	}
	if res != nil && span.IsRecording() {
		span.SetAttributes(tracing.AttrJobID.Int64(res.Job.ID))
		if res.Duplicate {
			span.SetAttributes(tracing.AttrDuplicate.Bool(true))
		}
	}
	tracing.Fail(span, err)
	span.End()
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
	ctx := context.Background()
	if r.span != nil {
		ctx = trace.ContextWithSpan(ctx, r.span)
	}
	_, span := c.tracer.Start(ctx, writeSpans[op], trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(c.jobAttrs(r.row)...)
		if batch > 0 {
			span.SetAttributes(tracing.AttrBatch.Int(batch))
		}
	}
	endWrite(span, r.row.Token, werr)
}

// writeSpans names the span of each write of an outcome.
var writeSpans = map[string]string{
	"complete": "aegis.queue.complete",
	"retry":    "aegis.queue.retry",
	"snooze":   "aegis.queue.snooze",
	"cancel":   "aegis.queue.cancel",
	"discard":  "aegis.queue.discard",
}

// startCompleteTx starts the span of CompleteTx, a child of ctx's (the
// handler's: its work span).
func (c *Client) startCompleteTx(ctx context.Context, r *run) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, "aegis.queue.complete")
	if span.IsRecording() {
		span.SetAttributes(c.jobAttrs(r.row, tracing.AttrInTx.Bool(true))...)
	}
	return ctx, span
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

// tracePass records a maintenance pass that did work or failed as the
// span aegis.queue.maintenance, with what it did, and its reclaim of
// expired leases, if it reclaimed a job or failed, as the child
// aegis.queue.reclaim: a pass that found nothing to do leaves no trace.
func (c *Client) tracePass(ps *pass) {
	if ps.reclaimed == 0 && ps.promoted == 0 && ps.pruned == 0 && !ps.vacuumed && ps.err == nil {
		return
	}
	ctx, span := c.tracer.Start(context.Background(), "aegis.queue.maintenance", trace.WithTimestamp(ps.start))
	if span.IsRecording() {
		span.SetAttributes(tracing.Node(c.cfg.ID), tracing.AttrReclaimed.Int(ps.reclaimed),
			tracing.AttrPromoted.Int(ps.promoted), tracing.AttrPruned.Int64(ps.pruned))
		tracing.Fail(span, ps.err)
	}
	if ps.reclaimed > 0 || ps.reapErr != nil {
		_, reclaim := c.tracer.Start(ctx, "aegis.queue.reclaim", trace.WithTimestamp(ps.start))
		if reclaim.IsRecording() {
			reclaim.SetAttributes(tracing.Node(c.cfg.ID), tracing.AttrReclaimed.Int(ps.reclaimed), tracing.AttrDiscarded.Int(ps.discarded))
			tracing.Fail(reclaim, ps.reapErr)
		}
		reclaim.End(trace.WithTimestamp(ps.reapEnd))
	}
	span.End()
}

// traceHeartbeatErr records a heartbeat of n claims that began at start
// and failed with err: the span aegis.queue.heartbeat, a trace of its own
// (it renews many jobs' leases).
func (c *Client) traceHeartbeatErr(start time.Time, n int, err error) {
	_, span := c.tracer.Start(context.Background(), "aegis.queue.heartbeat", trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(tracing.Node(c.cfg.ID), tracing.AttrJobs.Int(n))
		tracing.Fail(span, err)
	}
	span.End()
}

// traceLost records the heartbeat that began at start and found r's
// lease lost (its token moved on): the span aegis.queue.heartbeat, a
// child of r's work span, with the job's attributes and the refusal as the
// event aegis.fence.refused.
func (c *Client) traceLost(r *run, start time.Time) {
	ctx := context.Background()
	if r.span != nil {
		ctx = trace.ContextWithSpan(ctx, r.span)
	}
	_, span := c.tracer.Start(ctx, "aegis.queue.heartbeat", trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(c.jobAttrs(r.row)...)
	}
	endWrite(span, r.row.Token, aegis.ErrStale)
}
