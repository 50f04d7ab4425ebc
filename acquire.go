package aegis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis/internal/backoff"
)

// retry is the polling schedule of Acquire between attempts: short enough
// that a freed key is taken within tens of milliseconds, capped so that many
// waiters on one key do not flood the store.
var retry = backoff.Backoff{Min: 5 * time.Millisecond, Max: 250 * time.Millisecond}

// Acquire retries TryAcquire (jittered backoff, or a backend's wake-up
// notification where it has one) until it succeeds or ctx ends.
//
// A Locker that implements [Waiter] waits in its store's own queue instead.
// Acquire returns at once on any error other than ErrHeld (bad input, an
// unreachable store, a Notifier that cannot subscribe): waiting would not
// fix it. When ctx ends it returns an error wrapping ctx.Err().
func Acquire(ctx context.Context, l Locker, key string, ttl time.Duration) (*Lease, error) {
	if w, ok := l.(Waiter); ok {
		return w.Acquire(ctx, key, ttl)
	}
	n, _ := l.(Notifier)
	for attempt := 0; ; attempt++ {
		var wake <-chan struct{}
		stop := func() {}
		if n != nil {
			// Subscribe before the attempt: a release that lands between a
			// failed attempt and the wait still wakes us. A subscription
			// refused (a missing permission, an unreachable store) is an
			// error, never a silent fall back to polling late.
			ch, cancel, err := n.Notify(ctx, key)
			if err != nil {
				return nil, fmt.Errorf("acquire %q: wait for release: %w", key, err)
			}
			wake, stop = ch, cancel
		}
		lease, err := l.TryAcquire(ctx, key, ttl)
		if !errors.Is(err, ErrHeld) {
			stop()
			return lease, err
		}
		woken, err := backoff.Wait(ctx, wake, retry.Delay(attempt))
		stop()
		if err != nil {
			return nil, fmt.Errorf("acquire %q: %w", key, err)
		}
		if woken {
			attempt = -1 // the key was just freed: start the schedule again
		}
	}
}
