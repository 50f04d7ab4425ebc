package memlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLocktest(t *testing.T) {
	t.Parallel()
	shared := memlease.New()
	locktest.Run(t, locktest.Config{
		// One store, as processes share a database; memlease's store is
		// the Locker itself, so every "instance" is the same value.
		New: func(*testing.T) aegis.Locker { return shared },
		TTL: time.Second, // long enough that a loaded machine (a second suite beside this one) does not expire a lease held across a few calls
	})
}

// TestSecondWaiterWakesOnExpiry: two waiters queue behind a holder; the
// first is granted and never releases; the second takes the key when that
// lease expires (nothing is released, so only the expiry can wake it).
func TestSecondWaiterWakesOnExpiry(t *testing.T) {
	t.Parallel()
	l := memlease.New()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	held, err := l.TryAcquire(ctx, "k", 100*time.Millisecond)
	require.NoError(t, err)
	got := make(chan *aegis.Lease, 2)
	for range 2 {
		go func() {
			lease, err := l.Acquire(ctx, "k", 100*time.Millisecond)
			if err != nil {
				lease = nil
			}
			got <- lease
		}()
	}
	for i := range 2 {
		select {
		case lease := <-got:
			require.NotNil(t, lease, "waiter %d failed", i)
			require.Greater(t, lease.Token, held.Token)
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d got no grant within 5s of expiries of 100ms", i)
		}
	}
}
