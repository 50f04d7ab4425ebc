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
