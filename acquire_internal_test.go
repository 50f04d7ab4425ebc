package aegis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/backoff"
)

// notifying is a Locker whose key is held until free is closed, and which
// announces the release through Notify.
type notifying struct {
	free     chan struct{}
	attempts atomic.Int32
	mu       sync.Mutex
	subs     []chan struct{}
	closed   bool // Notify hands out closed channels: a failed subscription
}

func (n *notifying) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	n.attempts.Add(1)
	select {
	case <-n.free:
		return &Lease{Key: key, Token: 1, Owner: "o", TTL: ttl}, nil
	default:
		return nil, ErrHeld
	}
}
func (n *notifying) Renew(context.Context, *Lease, time.Duration) error { return nil }
func (n *notifying) Release(context.Context, *Lease) error              { return nil }
func (n *notifying) Notify(context.Context, string) (<-chan struct{}, func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := make(chan struct{}, 1)
	if n.closed {
		close(ch)
	}
	n.subs = append(n.subs, ch)
	return ch, func() {}, nil
}
func (n *notifying) release() {
	close(n.free)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// With a polling delay of an hour, only the notification can end the wait.
func TestAcquireWakesOnNotification(t *testing.T) {
	saved := retry
	retry = backoff.Backoff{Min: time.Hour, Max: time.Hour}
	defer func() { retry = saved }()

	n := &notifying{free: make(chan struct{})}
	got := make(chan error, 1)
	go func() {
		_, err := Acquire(t.Context(), n, "k", time.Second)
		got <- err
	}()
	require.Eventually(t, func() bool { return n.attempts.Load() == 1 }, 5*time.Second, time.Millisecond)
	n.release()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire ignored the notification")
	}
}

// A closed notification channel (a failed subscription) must not turn the
// wait into a busy loop.
func TestAcquireFailedSubscriptionPolls(t *testing.T) {
	n := &notifying{free: make(chan struct{}), closed: true}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := Acquire(ctx, n, "k", time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Polling from 5ms doubling to 250ms makes a handful of attempts in
	// 200ms; a busy loop makes thousands.
	require.Less(t, n.attempts.Load(), int32(20))
}

type failing struct{ notifying }

var errDown = errors.New("store down")

func (*failing) TryAcquire(context.Context, string, time.Duration) (*Lease, error) {
	return nil, errDown
}

func TestAcquireReturnsStoreErrors(t *testing.T) {
	t.Parallel()
	_, err := Acquire(t.Context(), &failing{}, "k", time.Second)
	require.ErrorIs(t, err, errDown, "waiting does not fix an unreachable store")
}

func TestHeldErrSeesPassedDeadline(t *testing.T) {
	t.Parallel()
	n := &notifying{free: make(chan struct{})}
	past := &Lease{Key: "k", Token: 1, Owner: "o", TTL: time.Hour, Deadline: time.Now().Add(-time.Millisecond)}
	h := Keep(t.Context(), n, past)
	require.ErrorIs(t, h.Err(), ErrLost)
	<-h.Context().Done()
	require.ErrorIs(t, context.Cause(h.Context()), ErrLost)
	require.NoError(t, h.Release(t.Context()))
}

// refusing is a Locker whose key is held and whose subscriptions are
// refused, as Redis refuses a user without +subscribe.
type refusing struct{ notifying }

var errNoPerm = errors.New("NOPERM: no permission to subscribe")

func (*refusing) Notify(context.Context, string) (<-chan struct{}, func(), error) {
	return nil, nil, errNoPerm
}

func TestAcquireFailsWhenNotifyFails(t *testing.T) {
	t.Parallel()
	l := &refusing{notifying{free: make(chan struct{})}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := Acquire(ctx, l, "k", time.Second)
	require.ErrorIs(t, err, errNoPerm, "a refused subscription is an error, not a silent fall back to polling")
	require.ErrorContains(t, err, `acquire "k": wait for release`)
	require.Zero(t, l.attempts.Load(), "no attempt is made without the subscription that would wake it")
}
