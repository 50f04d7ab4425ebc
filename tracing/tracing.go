// Package tracing is Aegis's OpenTelemetry tracing: [Locker] wraps any
// aegis.Locker so that its acquires, renewals and releases are spans, and
// [Start] and the attribute constructors are what the other packages
// (fence, queue) start their spans with, under one set of names.
//
// Tracing is off unless a trace.TracerProvider is given, and off costs
// nothing: Locker(l, nil) returns l itself, queue.Config.TracerProvider nil
// starts no span, and the fence traces a check only when the context it is
// given carries a span (it starts a child with that span's provider). No
// package of Aegis reads the global provider (otel.GetTracerProvider);
// pass it explicitly to trace with it.
//
// # Spans
//
//	aegis.lease.acquire   one TryAcquire (also each attempt of aegis.Acquire)
//	aegis.lease.wait      the blocking Acquire of a Locker that queues waiters in its store (aegis.Waiter)
//	aegis.lease.renew     one Renew, also the renewals of aegis.Hold and aegis.Keep
//	aegis.lease.release   one Release, also Held.Release's (Held.ReleaseAfter's is a renew)
//	aegis.fence.check     fence.Check, CheckSQL, CheckLease, CheckLeaseSQL
//	aegis.fence.exec      fence.Exec, ExecSQL
//	aegis.queue.enqueue   one Enqueue, EnqueueTx, EnqueueMany or EnqueueManyTx
//	aegis.queue.claim     one claim statement of a queue client that got jobs or failed (an idle poll is none)
//	aegis.queue.work      one job's handler run; its context carries the span
//	aegis.queue.complete  one job's completion (also retry, snooze, cancel, discard: aegis.queue.<op>)
//	aegis.queue.heartbeat a heartbeat that failed (a trace of its own), or found a job's lease lost (the job's)
//	aegis.queue.maintenance  a pass of a queue client's reaper that did work (an idle pass is none)
//	aegis.queue.reclaim   its reclaim of expired leases, when it reclaimed a job
//
// # Parents and links
//
// A span is a child of the span of the context its call is given, with
// these exceptions. aegis.queue.claim, a heartbeat's failure and
// aegis.queue.maintenance start traces of their own (no caller's context
// is theirs). aegis.queue.work of a job's first attempt is a child of the
// span that enqueued it: aegis.queue.enqueue, or for a client without a
// TracerProvider the span of Enqueue's context, whose trace context is
// stored with the job (a W3C traceparent); one trace runs from the
// enqueuing request (a scheduled run, an HTTP request) to the work, in
// another process as well. A later attempt (a retry, a job reclaimed
// from a lost worker) starts a trace of its own linked to the enqueuer's
// span; a job without a stored trace context (enqueued untraced, or
// before the queue's migration 4) or with one that does not parse does
// too. Every aegis.queue.work is also linked to its aegis.queue.claim.
// The writes of its outcome and a lease it lost (aegis.queue.heartbeat)
// are its children. The scheduler's spans (aegis.schedule.fire, .run,
// .reclaim) are described in package schedule.
//
// # Attributes and events
//
//	aegis.key              the lease key
//	aegis.token            the fencing token: the grant's, the writer's, the job's claim's
//	aegis.node             the process's name where one exists (a Locker's, given to [Locker]; a queue client's ID)
//	aegis.backend          the Locker's package (pglease, redislease, …), or the name given to [Locker]
//	aegis.lease.held       true on an acquire refused because another owner's lease is live (aegis.ErrHeld)
//	aegis.fence.resource   the fenced resource
//	aegis.fence.current    on the event aegis.fence.refused: the token the store held (0: not read, as for the queue's writes)
//	aegis.queue.name       a job's queue
//	aegis.queue.kind       a job's kind
//	aegis.queue.job_id     a job's id
//	aegis.queue.attempt    a job's attempt, 1 for the first
//	aegis.queue.claimed    on a claim: the jobs it got
//	aegis.queue.batch      on a batched completion: the completions written in its statement; on an enqueue of many: the jobs
//	aegis.queue.in_tx      on a completion: true when CompleteTx wrote it in the handler's transaction
//	aegis.queue.duplicate  on an enqueue: true when a live job held its unique key (nothing inserted)
//	aegis.queue.jobs       on a failed heartbeat: the claims it renewed
//	aegis.queue.reclaimed  on a maintenance pass and its reclaim: the jobs whose expired lease it took back
//	aegis.queue.discarded  on a reclaim: of those, the jobs discarded (no attempt left)
//	aegis.queue.promoted   on a maintenance pass: the scheduled jobs it made available
//	aegis.queue.pruned     on a maintenance pass: the finished jobs it deleted
//
// An enqueue of many jobs carries aegis.queue.batch (the jobs) and no job's
// attributes. The attributes of Locker's, the fence's and the queue's
// spans are set only on a span that records: a span its sampler dropped
// costs no attributes, so a sampler sees their name and parent, not their
// attributes.
//
// An error is recorded on its span (span.RecordError, status Error), with
// two exceptions that are answers, not failures: an acquire refused with
// aegis.ErrHeld (aegis.lease.held, status unset) and a blocking wait ended
// by its own context. A write the fence refused is status Error with the
// event aegis.fence.refused, whose attributes are aegis.token (the
// writer's) and aegis.fence.current (the one the store held).
//
// # What is never recorded
//
// A lease's Owner: for Redis and Redlock it is the secret that renews and
// releases the lease. No span attribute or event carries it, and no error
// Aegis records does (its errors never contain it; should a Locker's
// Renew or Release error contain the owner of the lease it was given, the
// recorded text has it replaced by "[owner]"). Nor a DSN or a password,
// which Aegis's errors never contain either.
//
// # What it does not do
//
// Carry the tracestate of an enqueuer to the work: a job stores the
// traceparent only. Read the token of fence.Exec's statement: it is an
// argument the fence cannot tell from the others, so aegis.fence.exec
// carries the token of the scheduled run of its context, if any.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/aegislab/aegis"
)

// The attribute keys of Aegis's spans and events, all under "aegis.".
const (
	AttrKey      attribute.Key = "aegis.key"
	AttrToken    attribute.Key = "aegis.token"
	AttrNode     attribute.Key = "aegis.node"
	AttrBackend  attribute.Key = "aegis.backend"
	AttrHeld     attribute.Key = "aegis.lease.held"
	AttrResource attribute.Key = "aegis.fence.resource"
	AttrCurrent  attribute.Key = "aegis.fence.current"
	AttrQueue    attribute.Key = "aegis.queue.name"
	AttrKind     attribute.Key = "aegis.queue.kind"
	AttrJobID    attribute.Key = "aegis.queue.job_id"
	AttrAttempt  attribute.Key = "aegis.queue.attempt"
	AttrClaimed  attribute.Key = "aegis.queue.claimed"
	AttrBatch    attribute.Key = "aegis.queue.batch"
	AttrInTx     attribute.Key = "aegis.queue.in_tx"
	// The queue's, since issue 34: an enqueue that found a live job
	// holding its unique key (nothing inserted), a heartbeat's claims, and
	// a reaper pass's jobs reclaimed (made available again or discarded),
	// promoted and pruned.
	AttrDuplicate attribute.Key = "aegis.queue.duplicate"
	AttrJobs      attribute.Key = "aegis.queue.jobs"
	AttrReclaimed attribute.Key = "aegis.queue.reclaimed"
	AttrDiscarded attribute.Key = "aegis.queue.discarded"
	AttrPromoted  attribute.Key = "aegis.queue.promoted"
	AttrPruned    attribute.Key = "aegis.queue.pruned"
	// The scheduler's (package schedule): a tick's fire time (RFC 3339),
	// a run's attempt, and whether this replica claimed the tick.
	AttrFire         attribute.Key = "aegis.schedule.fire"
	AttrRunAttempt   attribute.Key = "aegis.schedule.attempt"
	AttrScheduleMode attribute.Key = "aegis.schedule.mode"
	AttrClaimedTick  attribute.Key = "aegis.schedule.claimed"
)

// EventRefused is the name of the event a fence refusal adds to its span.
const EventRefused = "aegis.fence.refused"

// Token is the aegis.token attribute: a fencing token.
func Token(t aegis.Token) attribute.KeyValue { return AttrToken.Int64(int64(t)) }

// Key is the aegis.key attribute: a lease key.
func Key(key string) attribute.KeyValue { return AttrKey.String(key) }

// Node is the aegis.node attribute: the name of the process (a scheduler's
// or a candidate's Config.Node, a queue client's ID). Never pass a lease's
// Owner: for Redis it is a secret.
func Node(name string) attribute.KeyValue { return AttrNode.String(name) }

// Backend is the aegis.backend attribute: the kind of store a Locker
// uses.
func Backend(name string) attribute.KeyValue { return AttrBackend.String(name) }

// Resource is the aegis.fence.resource attribute: a fenced resource.
func Resource(name string) attribute.KeyValue { return AttrResource.String(name) }

// Tracer returns tp's tracer for the instrumentation scope (the importing
// package's path, as "github.com/aegislab/aegis/queue"), or nil when tp is
// nil or OpenTelemetry's no-op provider: a package keeps the result and
// checks it for nil on its hot paths, so that tracing off costs a nil
// check. Start takes the nil tracer too.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(scope)
}

// Start starts a span named name, a child of ctx's span if it has one,
// with attrs, and returns it with a context that carries it. The caller
// ends the span.
//
// A nil tracer starts nothing: Start returns ctx and a span that records
// nothing (its End and every other method do nothing), never ctx's own
// span, so ending it cannot end the caller's. The attrs are still built by
// the caller, so a hot path that may run untraced checks its tracer before
// it calls Start.
func Start(ctx context.Context, tracer trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, noSpan
	}
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// noSpan records nothing: the span of a context that carries none.
var noSpan = trace.SpanFromContext(context.Background())

// Fail records err on span as an error (span.RecordError) and sets the
// span's status to Error with err's text. A nil err does nothing.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Refused records a write the fence refused on span: the event
// aegis.fence.refused with the writer's token (aegis.token) and the one
// the store held (aegis.fence.current, 0 when it is not known), and the
// status Error.
func Refused(span trace.Span, writer, current aegis.Token) {
	if !span.IsRecording() {
		return
	}
	span.AddEvent(EventRefused, trace.WithAttributes(Token(writer), AttrCurrent.Int64(int64(current))))
	span.SetStatus(codes.Error, aegis.ErrStale.Error())
}

// failHiding is Fail for an error of a call that was given a lease: its
// owner, if the text contains it, is replaced by "[owner]". Aegis's
// backends never put the owner in an error; this holds for a Locker that
// does.
func failHiding(span trace.Span, err error, owner string) {
	if err == nil || !span.IsRecording() {
		return
	}
	if owner != "" && strings.Contains(err.Error(), owner) {
		err = hidden{err, strings.ReplaceAll(err.Error(), owner, "[owner]")}
	}
	Fail(span, err)
}

// hidden is an error whose text had the owner replaced; it still wraps
// the original, for errors.Is.
type hidden struct {
	err  error
	text string
}

func (h hidden) Error() string { return h.text }
func (h hidden) Unwrap() error { return h.err }
