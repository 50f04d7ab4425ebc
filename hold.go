package aegis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aegislab/aegis/driver"
)

// cleanupTimeout bounds a release that runs after the caller's context was
// cancelled.
const cleanupTimeout = 5 * time.Second

// errReleased is the cause of a Held's context after Release.
var errReleased = errors.New("aegis: lease released")

// Held is a lease kept alive by a background renewal. Create it with [Hold]
// or [Keep]; end it with [Held.Release] or [Held.ReleaseAfter]. Its methods
// are safe for concurrent use.
type Held struct {
	locker Locker
	ctx    context.Context // cancelled when the lease can no longer be trusted
	cancel context.CancelCauseFunc
	stop   context.CancelFunc // ends the renewal loop
	done   chan struct{}      // closed when the renewal loop has returned

	mu    sync.Mutex
	lease Lease // Deadline moves forward with each renewal

	once sync.Once // the final release or hand-back, run exactly once
	err  error
}

// Hold acquires and renews every ttl/3. Held.Context() is cancelled as soon
// as a renewal fails or the local deadline passes without one, so work stops
// before another owner can be granted the key.
//
// Hold blocks in [Acquire] until the key is granted or ctx ends. When ctx
// ends after the grant, renewal stops and the lease is released. The caller
// must call Release (or ReleaseAfter) to stop the renewal goroutine.
func Hold(ctx context.Context, l Locker, key string, ttl time.Duration) (*Held, error) {
	lease, err := Acquire(ctx, l, key, ttl)
	if err != nil {
		return nil, err
	}
	return Keep(ctx, l, lease), nil
}

// Keep starts renewing a lease that was already granted (by TryAcquire, say)
// with the same rules as [Hold].
func Keep(ctx context.Context, l Locker, lease *Lease) *Held {
	hctx, cancel := context.WithCancelCause(ctx)
	loopCtx, stop := context.WithCancel(ctx)
	h := &Held{
		locker: l,
		ctx:    hctx,
		cancel: cancel,
		stop:   stop,
		done:   make(chan struct{}),
		lease:  *lease,
	}
	go h.renew(loopCtx, ctx)
	return h
}

// Context is cancelled when the lease is lost (a renewal failed, or the local
// deadline passed without one), released, or when the context given to Hold
// ends. context.Cause tells which; for a loss it wraps ErrLost.
func (h *Held) Context() context.Context { return h.ctx }

// Lease returns a copy of the lease, with the deadline of the last renewal.
func (h *Held) Lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// String describes the held lease without its owner (see [Lease.String]).
func (h *Held) String() string { return "held " + h.Lease().String() }

// GoString is String, so %#v does not print the owner either.
func (h *Held) GoString() string { return h.String() }

// LogValue is the held lease for log/slog, without its owner.
func (h *Held) LogValue() slog.Value { return h.Lease().LogValue() }

// Token is the lease's fencing token: send it with every write.
func (h *Held) Token() Token { return h.Lease().Token }

// Err returns nil while the lease can be trusted, and otherwise why not (an
// error wrapping ErrLost when it was lost). Unlike Context, it also compares
// the local deadline with the clock at the moment of the call, so a process
// resumed after a pause sees the loss before the renewal goroutine runs.
func (h *Held) Err() error {
	if err := context.Cause(h.ctx); err != nil {
		return err
	}
	if l := h.Lease(); !time.Now().Before(l.Deadline) {
		h.cancel(deadlinePassed(l.Key))
		return context.Cause(h.ctx)
	}
	return nil
}

// Release stops renewing and releases the lease. It is idempotent: later
// calls return the first call's result. It runs even when ctx is already
// cancelled, with a short timeout of its own, so a cancelled caller cannot
// strand a lease. It returns ErrLost when the lease had been lost.
func (h *Held) Release(ctx context.Context) error {
	return h.finish(ctx, 0)
}

// ReleaseAfter stops renewing and leaves the lease to expire keep from now
// instead of releasing it: ShedLock's lockAtLeastFor for a job that ended
// early. A keep too short to renew for (at most its clock-drift margin,
// [driver.Drift]: it would be gone by the time the store answers) releases at
// once, as keep <= 0 does. Like Release it is idempotent and returns
// ErrLost when the lease had been lost.
func (h *Held) ReleaseAfter(ctx context.Context, keep time.Duration) error {
	return h.finish(ctx, keep)
}

func (h *Held) finish(ctx context.Context, keep time.Duration) error {
	h.stop()
	<-h.done
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		lease := h.Lease()
		if driver.CheckTTL(keep, 0) == nil { // else too short to renew for: gone by the time the store answers
			h.err = h.locker.Renew(ctx, &lease, keep)
		} else {
			h.err = h.locker.Release(ctx, &lease)
		}
		h.cancel(errReleased)
	})
	return h.err
}

// deadlinePassed is the cause of a loss noticed by the clock: no renewal
// succeeded before the lease's local deadline (a pause, a slow store).
func deadlinePassed(key string) error {
	return fmt.Errorf("%w: lease %q: local deadline passed without a renewal", ErrLost, key)
}

// renew runs until loopCtx ends or the lease is lost. parent is the context
// given to Hold: when it ends, the lease is released.
func (h *Held) renew(loopCtx, parent context.Context) {
	defer close(h.done)
	lease := h.Lease()
	for {
		// Renew every TTL/3, and at least twice before the deadline: a
		// backend may set a deadline earlier than TTL − drift (zklease's
		// follows its session timeout too).
		interval := max(min(lease.TTL/3, time.Until(lease.Deadline)/2), time.Millisecond)
		next := time.NewTimer(interval)
		expire := time.NewTimer(time.Until(lease.Deadline))
		select {
		case <-loopCtx.Done():
		case <-expire.C:
		case <-next.C:
		}
		next.Stop()
		expire.Stop()
		if loopCtx.Err() != nil {
			if parent.Err() != nil {
				h.cancel(context.Cause(parent))
				h.once.Do(func() {
					ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cleanupTimeout)
					defer cancel()
					h.err = h.locker.Release(ctx, &lease)
				})
			}
			return
		}
		// After a pause both timers may be due; the deadline decides.
		if !time.Now().Before(lease.Deadline) {
			h.cancel(deadlinePassed(lease.Key))
			return
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(loopCtx, lease.Deadline)
		err := h.locker.Renew(ctx, &lease, lease.TTL)
		cancel()
		if err != nil {
			if loopCtx.Err() != nil {
				continue // stopped while renewing: the top of the loop decides
			}
			if errors.Is(err, ErrLost) {
				err = fmt.Errorf("lease %q: renewal refused: %w", lease.Key, err)
			} else {
				err = fmt.Errorf("%w: lease %q: renewal failed: %w", ErrLost, lease.Key, err)
			}
			h.cancel(err)
			return
		}
		// The earlier of Hold's own deadline and the one Renew set: a
		// backend that knows a tighter bound (a session) is never overruled.
		if d := driver.LocalDeadline(start, lease.TTL); lease.Deadline.IsZero() || d.Before(lease.Deadline) {
			lease.Deadline = d
		}
		h.mu.Lock()
		h.lease.Deadline = lease.Deadline
		h.mu.Unlock()
	}
}
