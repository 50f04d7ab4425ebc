package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/leasemetrics"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/locktest"
	"github.com/aegislab/aegis/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newProvider is a TracerProvider that samples every span into a
// recorder, read with Ended.
func newProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return tp, rec
}

// attrs is a span's or an event's attributes by key.
func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// named returns the ended spans called name, in the order they ended.
func named(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// requireOne returns the one ended span called name.
func requireOne(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := named(rec, name)
	require.Len(t, spans, 1, "one %s span", name)
	return spans[0]
}

func requireChild(t *testing.T, parent trace.Span, s sdktrace.ReadOnlySpan) {
	t.Helper()
	require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID(), "%s is in its caller's trace", s.Name())
	require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of its caller's span", s.Name())
}

// TestLockerSpans: each call of a traced Locker is a span, a child of the
// caller's, with the key, the backend, the node given and the token; an
// acquire refused as held is no error; a lost lease is.
func TestLockerSpans(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	l := tracing.Locker(memlease.New(), tp, tracing.Node("node-1"))
	ctx, root := tp.Tracer("test").Start(t.Context(), "caller")

	lease, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, l.Renew(ctx, lease, time.Minute))
	require.NoError(t, l.Release(ctx, lease))
	require.ErrorIs(t, l.Release(ctx, lease), aegis.ErrLost)
	root.End()

	acquires := named(rec, "aegis.lease.acquire")
	require.Len(t, acquires, 2)
	for _, s := range rec.Ended() {
		if s.Name() == "caller" {
			continue
		}
		requireChild(t, root, s)
		a := attrs(s.Attributes())
		require.Equal(t, "k", a[tracing.AttrKey].AsString(), s.Name())
		require.Equal(t, "memlease", a[tracing.AttrBackend].AsString(), s.Name())
		require.Equal(t, "node-1", a[tracing.AttrNode].AsString(), s.Name())
	}
	granted := attrs(acquires[0].Attributes())
	require.Equal(t, int64(lease.Token), granted[tracing.AttrToken].AsInt64(), "the grant's token")
	require.Equal(t, codes.Unset, acquires[0].Status().Code)
	held := attrs(acquires[1].Attributes())
	require.True(t, held[tracing.AttrHeld].AsBool(), "a refused acquire says the key is held")
	require.NotContains(t, held, tracing.AttrToken, "a refused acquire has no token")
	require.Equal(t, codes.Unset, acquires[1].Status().Code, "held is an answer, not an error")
	require.Empty(t, acquires[1].Events())

	renew := requireOne(t, rec, "aegis.lease.renew")
	require.Equal(t, int64(lease.Token), attrs(renew.Attributes())[tracing.AttrToken].AsInt64())
	require.Equal(t, codes.Unset, renew.Status().Code)

	releases := named(rec, "aegis.lease.release")
	require.Len(t, releases, 2)
	require.Equal(t, codes.Unset, releases[0].Status().Code)
	lost := releases[1]
	require.Equal(t, codes.Error, lost.Status().Code, "a lost lease is an error")
	require.Contains(t, lost.Status().Description, aegis.ErrLost.Error())
	require.Len(t, lost.Events(), 1)
	require.Equal(t, "exception", lost.Events()[0].Name, "RecordError's event")

	for _, s := range rec.Ended() {
		requireNoOwner(t, s, lease.Owner)
	}
}

// requireNoOwner asserts that the owner value appears in no attribute,
// event or status of s.
func requireNoOwner(t *testing.T, s sdktrace.ReadOnlySpan, owner string) {
	t.Helper()
	require.NotEmpty(t, owner)
	require.NotContains(t, s.Name(), owner)
	require.NotContains(t, s.Status().Description, owner, s.Name())
	for _, kv := range s.Attributes() {
		require.NotContains(t, kv.Value.String(), owner, "%s: attribute %s", s.Name(), kv.Key)
	}
	for _, e := range s.Events() {
		require.NotContains(t, e.Name, owner, s.Name())
		for _, kv := range e.Attributes {
			require.NotContains(t, kv.Value.String(), owner, "%s: event %s: attribute %s", s.Name(), e.Name, kv.Key)
		}
	}
}

// TestLockerKeepsOptionalInterfaces: the wrapper is an aegis.Notifier or
// an aegis.Waiter exactly when the Locker it wraps is, so aegis.Acquire
// waits on it the same way.
func TestLockerKeepsOptionalInterfaces(t *testing.T) {
	t.Parallel()
	tp, _ := newProvider(t)
	m := memlease.New()
	for _, tc := range []struct {
		name             string
		l                aegis.Locker
		notifier, waiter bool
	}{
		{"neither", struct{ aegis.Locker }{m}, false, false},
		{"notifier", struct {
			aegis.Locker
			aegis.Notifier
		}{m, m}, true, false},
		{"waiter", struct {
			aegis.Locker
			aegis.Waiter
		}{m, m}, false, true},
		{"both", m, true, true},
	} {
		w := tracing.Locker(tc.l, tp)
		_, isN := w.(aegis.Notifier)
		_, isW := w.(aegis.Waiter)
		require.Equal(t, tc.notifier, isN, "%s: Notifier", tc.name)
		require.Equal(t, tc.waiter, isW, "%s: Waiter", tc.name)
		u, ok := w.(interface{ Unwrap() aegis.Locker })
		require.True(t, ok, tc.name)
		require.Equal(t, tc.l, u.Unwrap(), tc.name)
	}
}

// TestAcquireAndHold: aegis.Acquire on a traced Waiter is one wait span
// that ends with the grant; aegis.Hold's renewals, in its background
// goroutine, are spans of the trace Hold was called in, and its release
// too.
func TestAcquireAndHold(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	m := memlease.New()
	l := tracing.Locker(m, tp)
	ctx, root := tp.Tracer("test").Start(t.Context(), "caller")
	defer root.End()

	first, err := m.TryAcquire(ctx, "k", time.Minute) // untraced: another process
	require.NoError(t, err)
	got := make(chan *aegis.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		lease, err := aegis.Acquire(wctx, l, "k", time.Minute)
		if err != nil {
			t.Errorf("acquire: %v", err)
		}
		got <- lease
	}()
	require.Eventually(t, func() bool { return len(rec.Started()) == 2 }, 30*time.Second, time.Millisecond, "Acquire starts its wait span")
	require.NoError(t, m.Release(ctx, first))
	select {
	case lease := <-got:
		require.NotNil(t, lease)
		wait := requireOne(t, rec, "aegis.lease.wait")
		requireChild(t, root, wait)
		require.Equal(t, int64(lease.Token), attrs(wait.Attributes())[tracing.AttrToken].AsInt64())
		require.NoError(t, l.Release(ctx, lease))
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire was not granted within 30s of the release")
	}

	const ttl = 300 * time.Millisecond // renewals every 100ms
	h, err := aegis.Hold(ctx, l, "held", ttl)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(named(rec, "aegis.lease.renew")) >= 2 }, 30*time.Second, time.Millisecond,
		"Hold renews twice (every %s)", ttl/3)
	require.NoError(t, h.Release(ctx))
	for _, s := range named(rec, "aegis.lease.renew") {
		requireChild(t, root, s)
		require.Equal(t, "held", attrs(s.Attributes())[tracing.AttrKey].AsString())
		require.Equal(t, int64(h.Token()), attrs(s.Attributes())[tracing.AttrToken].AsInt64())
	}
	releases := named(rec, "aegis.lease.release")
	require.Len(t, releases, 2)
	requireChild(t, root, releases[1])
	require.Equal(t, codes.Unset, releases[1].Status().Code)
}

// TestWaitGivenUp: a blocking wait ended by its caller's context is no
// error on the span.
func TestWaitGivenUp(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	m := memlease.New()
	l := tracing.Locker(m, tp)
	_, err := m.TryAcquire(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err = aegis.Acquire(ctx, l, "k", time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	wait := requireOne(t, rec, "aegis.lease.wait")
	require.Equal(t, codes.Unset, wait.Status().Code)
	require.True(t, attrs(wait.Attributes())[tracing.AttrHeld].AsBool())
}

// TestLockerConformance: a traced Locker passes the conformance suite.
func TestLockerConformance(t *testing.T) {
	t.Parallel()
	tp, _ := newProvider(t)
	shared := tracing.Locker(memlease.New(), tp)
	locktest.Run(t, locktest.Config{
		New: func(*testing.T) aegis.Locker { return shared },
		TTL: time.Second, // long enough that a loaded machine (a second suite beside this one) does not expire a lease held across a few calls
	})
}

// TestBackendName: aegis.backend names the package of the Locker,
// looking through a wrapper that unwraps; a Backend attribute given
// replaces it.
func TestBackendName(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	wrapped, err := leasemetrics.Wrap(memlease.New(), "mem", prometheus.NewRegistry())
	require.NoError(t, err)
	for _, tc := range []struct {
		l     aegis.Locker
		attrs []attribute.KeyValue
		want  string
	}{
		{wrapped, nil, "memlease"},
		{memlease.New(), []attribute.KeyValue{tracing.Backend("in-process")}, "in-process"},
	} {
		rec.Reset()
		_, err := tracing.Locker(tc.l, tp, tc.attrs...).TryAcquire(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		s := requireOne(t, rec, "aegis.lease.acquire")
		var backends []string
		for _, kv := range s.Attributes() {
			if kv.Key == tracing.AttrBackend {
				backends = append(backends, kv.Value.AsString())
			}
		}
		require.Equal(t, []string{tc.want}, backends)
	}
}

// TestOff: without a TracerProvider (nil, or OpenTelemetry's no-op one)
// Locker returns the Locker it was given, the same value.
func TestOff(t *testing.T) {
	t.Parallel()
	m := memlease.New()
	require.Same(t, m, tracing.Locker(m, nil))
	require.Same(t, m, tracing.Locker(m, noop.NewTracerProvider()))
	plain := struct{ aegis.Locker }{m}
	require.Equal(t, aegis.Locker(plain), tracing.Locker(plain, nil))
}

// TestNilLocker: a nil Locker is an error at every call, with or without
// a TracerProvider, never a panic.
func TestNilLocker(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	for _, l := range []aegis.Locker{tracing.Locker(nil, nil), tracing.Locker(nil, tp)} {
		require.NotNil(t, l)
		_, err := l.TryAcquire(t.Context(), "k", time.Minute)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.EqualError(t, err, "aegis: invalid argument: tracing: the Locker is nil")
		require.ErrorIs(t, l.Renew(t.Context(), &aegis.Lease{}, time.Minute), aegis.ErrInvalid)
		require.ErrorIs(t, l.Release(t.Context(), nil), aegis.ErrInvalid)
	}
	require.Empty(t, rec.Ended())
}

// TestTracer: nil and the no-op provider give no tracer; a provider, its
// tracer for the scope.
func TestTracer(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	require.Nil(t, tracing.Tracer(nil, "s"))
	require.Nil(t, tracing.Tracer(noop.NewTracerProvider(), "s"))
	_, span := tracing.Start(t.Context(), tracing.Tracer(tp, "github.com/aegislab/aegis/schedule"), "aegis.schedule.fire")
	span.End()
	require.Equal(t, "github.com/aegislab/aegis/schedule", requireOne(t, rec, "aegis.schedule.fire").InstrumentationScope().Name)
}

// TestStart: Start with a tracer starts a child of ctx's span with the
// attributes; with a nil one it returns ctx and a span that records
// nothing, whose End cannot end the caller's.
func TestStart(t *testing.T) {
	t.Parallel()
	tp, rec := newProvider(t)
	tracer := tp.Tracer("test")
	ctx, root := tracer.Start(t.Context(), "caller")

	got, span := tracing.Start(ctx, nil, "off", tracing.Key("k"))
	require.Equal(t, ctx, got)
	require.False(t, span.IsRecording())
	span.End()
	require.True(t, root.IsRecording(), "ending the no-op span left the caller's alone")

	cctx, span := tracing.Start(ctx, tracer, "aegis.test", tracing.Token(7), tracing.Key("k"), tracing.Node("n"), tracing.Resource("r"))
	require.Equal(t, span, trace.SpanFromContext(cctx))
	tracing.Fail(span, nil)
	tracing.Fail(span, errors.New("boom"))
	span.End()
	_, refused := tracing.Start(ctx, tracer, "aegis.refused")
	tracing.Refused(refused, 3, 5)
	refused.End()
	root.End()

	s := requireOne(t, rec, "aegis.test")
	requireChild(t, root, s)
	require.Equal(t, map[attribute.Key]attribute.Value{
		"aegis.token":          attribute.Int64Value(7),
		"aegis.key":            attribute.StringValue("k"),
		"aegis.node":           attribute.StringValue("n"),
		"aegis.fence.resource": attribute.StringValue("r"),
	}, attrs(s.Attributes()))
	require.Equal(t, sdktrace.Status{Code: codes.Error, Description: "boom"}, s.Status())
	require.Len(t, s.Events(), 1, "one error recorded: Fail(nil) records nothing")

	r := requireOne(t, rec, "aegis.refused")
	require.Equal(t, codes.Error, r.Status().Code)
	require.Len(t, r.Events(), 1)
	require.Equal(t, tracing.EventRefused, r.Events()[0].Name)
	require.Equal(t, map[attribute.Key]attribute.Value{
		"aegis.token":         attribute.Int64Value(3),
		"aegis.fence.current": attribute.Int64Value(5),
	}, attrs(r.Events()[0].Attributes))
}
