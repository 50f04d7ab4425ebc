package tracing

import (
	"context"
	"errors"
	"fmt"
	"path"
	"reflect"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
)

// ScopeName is the instrumentation scope of the Locker's spans: the name
// of the tracer Locker asks its TracerProvider for.
const ScopeName = "github.com/aegislab/aegis/tracing"

// Locker returns l with every TryAcquire, Renew and Release (and the
// blocking Acquire of an aegis.Waiter) traced through tp: a span each,
// named and attributed as the package doc lists, a child of the span of
// the context the call is given. So aegis.Acquire's attempts, and the
// renewals of aegis.Hold and aegis.Keep (which run under the context Hold
// was given), are spans of the caller's trace.
//
// A nil tp, or OpenTelemetry's no-op provider, returns l itself: tracing
// off costs nothing. The result is an aegis.Notifier or an aegis.Waiter
// exactly when l is, so aegis.Acquire waits on it as on l; Notify is not
// traced. Its Unwrap method returns l.
//
// Every span carries aegis.key, aegis.backend (l's package name, as
// "pglease", looking through Lockers that have an Unwrap method such as
// leasemetrics's) and attrs: pass Node(name) to name the process, or
// Backend(name) to name the backend otherwise. Never pass a lease's
// Owner. A grant's span carries its aegis.token; Renew's and Release's,
// the lease's.
//
// A nil l returns a Locker whose every method returns an error wrapping
// aegis.ErrInvalid ("tracing: the Locker is nil"), whatever tp is, rather
// than a nil that would panic at its first call.
func Locker(l aegis.Locker, tp trace.TracerProvider, attrs ...attribute.KeyValue) aegis.Locker {
	if l == nil {
		return nilLocker{}
	}
	tracer := Tracer(tp, ScopeName)
	if tracer == nil {
		return l
	}
	t := &locker{l: l, tracer: tracer}
	if !slices.ContainsFunc(attrs, func(kv attribute.KeyValue) bool { return kv.Key == AttrBackend }) {
		t.attrs = append(t.attrs, Backend(backendName(l)))
	}
	t.attrs = append(t.attrs, attrs...)
	n, isN := l.(aegis.Notifier)
	w, isW := l.(aegis.Waiter)
	switch {
	case isN && isW:
		return &notifierWaiter{t, n, w}
	case isN:
		return &notifier{t, n}
	case isW:
		return &waiter{t, w}
	}
	return t
}

// backendName is the name of the package that defines l's type, looking
// through wrappers that say what they wrap.
func backendName(l aegis.Locker) string {
	for range 8 { // a bound, against a wrapper that unwraps to itself
		u, ok := l.(interface{ Unwrap() aegis.Locker })
		if !ok || u.Unwrap() == nil {
			break
		}
		l = u.Unwrap()
	}
	t := reflect.TypeOf(l)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return path.Base(p)
	}
	return t.String()
}

type locker struct {
	l      aegis.Locker
	tracer trace.Tracer
	attrs  []attribute.KeyValue // on every span: the backend, the caller's
}

var _ aegis.Locker = (*locker)(nil)

// start starts the span of one call on key, with the lease's token when
// the call has a lease (token > 0). The attributes are set only on a span
// that records: a span its sampler dropped costs its start and end, not
// the attributes (built in one allocation), so a sampler sees the span's
// name and parent, not its attributes (docs/decisions.md).
func (t *locker) start(ctx context.Context, name, key string, token aegis.Token) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, name)
	if !span.IsRecording() {
		return ctx, span
	}
	attrs := make([]attribute.KeyValue, 0, len(t.attrs)+2)
	attrs = append(append(attrs, Key(key)), t.attrs...)
	if token > 0 {
		attrs = append(attrs, Token(token))
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

func (t *locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	ctx, span := t.start(ctx, "aegis.lease.acquire", key, 0)
	defer span.End()
	lease, err := t.l.TryAcquire(ctx, key, ttl)
	granted(span, lease, err)
	return lease, err
}

// granted records the outcome of an acquire on its span.
func granted(span trace.Span, lease *aegis.Lease, err error) {
	if !span.IsRecording() {
		return
	}
	switch {
	case err == nil && lease != nil:
		span.SetAttributes(Token(lease.Token))
	case errors.Is(err, aegis.ErrHeld):
		span.SetAttributes(AttrHeld.Bool(true))
	default:
		Fail(span, err)
	}
}

func (t *locker) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	key, token, owner := leaseOf(l)
	ctx, span := t.start(ctx, "aegis.lease.renew", key, token)
	defer span.End()
	err := t.l.Renew(ctx, l, ttl)
	failHiding(span, err, owner)
	return err
}

func (t *locker) Release(ctx context.Context, l *aegis.Lease) error {
	key, token, owner := leaseOf(l)
	ctx, span := t.start(ctx, "aegis.lease.release", key, token)
	defer span.End()
	err := t.l.Release(ctx, l)
	failHiding(span, err, owner)
	return err
}

// leaseOf reads what a span says of a lease, nil or not (the wrapped
// Locker says what is wrong with a nil one).
func leaseOf(l *aegis.Lease) (key string, token aegis.Token, owner string) {
	if l == nil {
		return "", 0, ""
	}
	return l.Key, l.Token, l.Owner
}

// Unwrap returns the Locker that Locker was given.
func (t *locker) Unwrap() aegis.Locker { return t.l }

// wait is the traced blocking Acquire of a Waiter.
func (t *locker) wait(ctx context.Context, w aegis.Waiter, key string, ttl time.Duration) (*aegis.Lease, error) {
	ctx, span := t.start(ctx, "aegis.lease.wait", key, 0)
	defer span.End()
	lease, err := w.Acquire(ctx, key, ttl)
	if err != nil && ctx.Err() != nil {
		// The caller gave up waiting: an answer, not a failure.
		span.SetAttributes(AttrHeld.Bool(true))
		return lease, err
	}
	granted(span, lease, err)
	return lease, err
}

type notifier struct {
	*locker
	n aegis.Notifier
}

func (t *notifier) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return t.n.Notify(ctx, key)
}

type waiter struct {
	*locker
	w aegis.Waiter
}

func (t *waiter) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return t.wait(ctx, t.w, key, ttl)
}

type notifierWaiter struct {
	*locker
	n aegis.Notifier
	w aegis.Waiter
}

func (t *notifierWaiter) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return t.n.Notify(ctx, key)
}

func (t *notifierWaiter) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return t.wait(ctx, t.w, key, ttl)
}

// errNilLocker is what every method of the Locker of a nil Locker returns.
var errNilLocker = fmt.Errorf("%w: tracing: the Locker is nil", aegis.ErrInvalid)

// nilLocker is Locker(nil, …): an error at every call, never a panic.
type nilLocker struct{}

func (nilLocker) TryAcquire(context.Context, string, time.Duration) (*aegis.Lease, error) {
	return nil, errNilLocker
}
func (nilLocker) Renew(context.Context, *aegis.Lease, time.Duration) error { return errNilLocker }
func (nilLocker) Release(context.Context, *aegis.Lease) error              { return errNilLocker }
