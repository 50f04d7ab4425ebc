// Package rowleasetest holds test helpers that pglease's and sqlitelease's
// tests of the waiters' queue share.
package rowleasetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

// QueuedWaiter starts a waiter on l: aegis.Acquire of key, then Release of
// the grant. It returns once the waiter is in the store's queue, as
// entries (a count of key's queue rows, read directly) says, within 10s;
// the channel then receives the waiter's outcome.
func QueuedWaiter(t testing.TB, ctx context.Context, l aegis.Locker, key string, entries func() (int, error)) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		lease, err := aegis.Acquire(ctx, l, key, time.Minute)
		if err == nil {
			err = l.Release(ctx, lease)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		n, err := entries()
		return err == nil && n == 1
	}, 10*time.Second, time.Millisecond, "the waiter never entered the queue of %q", key)
	return got
}

// CrashedWaiterBlocksBriefly checks that a queue entry nobody refreshes (its
// waiter's process died) holds key up for at most its expiry. plant writes,
// straight into the store, what a waiter's enqueue leaves: an entry for key
// and the lease row's queue hint, both expiring a second from now.
func CrashedWaiterBlocksBriefly(t *testing.T, l aegis.Locker, key string, plant func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	held, err := l.TryAcquire(ctx, key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, plant(ctx), "plant a dead waiter's queue entry")
	require.NoError(t, l.Release(ctx, held))
	_, err = l.TryAcquire(ctx, key, time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld, "a live queue entry must hold the key for its waiter")
	start := time.Now()
	got, err := aegis.Acquire(ctx, l, key, time.Minute)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 3*time.Second, "a dead waiter's entry (1s) held the key too long")
	require.Greater(t, got.Token, held.Token)
}
