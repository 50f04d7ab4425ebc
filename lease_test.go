package aegis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckLease(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, aegis.CheckLease(nil), "lease is nil")
	require.ErrorContains(t, aegis.CheckLease(&aegis.Lease{Key: "k"}), "has no owner")
	require.ErrorContains(t, aegis.CheckLease(&aegis.Lease{Owner: "o"}), "key is empty")
	require.NoError(t, aegis.CheckLease(&aegis.Lease{Key: "k", Owner: "o"}))
}

func TestLeaseStringHidesOwner(t *testing.T) {
	t.Parallel()
	l := &aegis.Lease{Key: "k", Token: 7, Owner: "s3cret", TTL: time.Second}
	require.NotContains(t, l.String(), "s3cret")
	require.Contains(t, l.String(), "token 7")
}

func TestLeaseNeverPrintsOwner(t *testing.T) {
	t.Parallel()
	l := aegis.Lease{Key: "k", Token: 7, Owner: "s3cret-owner", TTL: time.Second, Deadline: time.Now()}
	for _, v := range []any{l, &l, []aegis.Lease{l}, map[string]*aegis.Lease{"x": &l}, struct{ L aegis.Lease }{l}} {
		locktest.RequireHidden(t, l.Owner, v)
	}
	forms := locktest.Printed(l)
	require.Contains(t, forms["fmt %v"], `lease "k" token 7 ttl 1s`)
	require.Contains(t, forms["slog JSON"], `"token":7`)
	require.Contains(t, forms["encoding/json"], `"key":"k"`)
	var nilLease *aegis.Lease
	require.NotPanics(t, func() { locktest.Printed(nilLease) })
}

func TestHeldNeverPrintsOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h, err := aegis.Hold(ctx, memlease.New(), "held/printed", time.Minute)
	require.NoError(t, err)
	defer h.Release(ctx)
	locktest.RequireHidden(t, h.Lease().Owner, h)
	locktest.RequireHidden(t, h.Lease().Owner, h.Lease())
	require.Contains(t, fmt.Sprint(h), `lease "held/printed"`)
}

// A lockAtLeastFor remainder too short to renew for (at most its drift
// margin) releases the lease instead of asking the store for a TTL it
// would refuse: the next holder gets it at once, and nothing fails.
func TestReleaseAfterTooShortReleases(t *testing.T) {
	ctx := t.Context()
	l := memlease.New()
	for _, keep := range []time.Duration{-time.Second, 0, time.Microsecond, 373 * time.Microsecond, driver.Drift(2 * time.Millisecond)} {
		require.Error(t, driver.CheckTTL(keep, 0), "%s is too short to renew for", keep)
		h, err := aegis.Hold(ctx, l, "keep/short", time.Minute)
		require.NoError(t, err)
		require.NoError(t, h.ReleaseAfter(ctx, keep), "keep %s", keep)
		next, err := l.TryAcquire(ctx, "keep/short", time.Minute)
		require.NoError(t, err, "keep %s: released at once", keep)
		require.NoError(t, l.Release(ctx, next))
	}
	h, err := aegis.Hold(ctx, l, "keep/long", time.Minute)
	require.NoError(t, err)
	require.NoError(t, h.ReleaseAfter(ctx, time.Minute))
	_, err = l.TryAcquire(ctx, "keep/long", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld, "kept for its minute")
}

func TestHoldLossNamesKeyAndReason(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := memlease.New()
	lease, err := l.TryAcquire(ctx, "loss/reason", 60*time.Millisecond)
	require.NoError(t, err)
	forged := *lease
	forged.Owner = "someone-else"
	h := aegis.Keep(ctx, l, &forged)
	defer h.Release(ctx)
	select {
	case <-h.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a renewal refused by the store did not cancel the held context within 10s")
	}
	cause := context.Cause(h.Context())
	require.ErrorIs(t, cause, aegis.ErrLost)
	require.ErrorContains(t, cause, `lease "loss/reason": renewal refused`)
	require.NotContains(t, cause.Error(), lease.Owner)
}

// tight is a Locker whose grants and renewals carry a deadline far shorter
// than their TTL, as zklease's do when its session timeout is the tighter
// bound.
type tight struct {
	inner    *memlease.Locker // not embedded: its Acquire (aegis.Waiter) would bypass TryAcquire
	renewals atomic.Int64
}

func (l *tight) Release(ctx context.Context, lease *aegis.Lease) error {
	return l.inner.Release(ctx, lease)
}

// tightDeadline leaves Hold, renewing at half of it, 300ms for a renewal
// that a loaded machine runs late.
const tightDeadline = 600 * time.Millisecond

func (l *tight) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	lease, err := l.inner.TryAcquire(ctx, key, ttl)
	if err == nil {
		lease.Deadline = time.Now().Add(tightDeadline)
	}
	return lease, err
}

func (l *tight) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	start := time.Now()
	if err := l.inner.Renew(ctx, lease, ttl); err != nil {
		return err
	}
	lease.Deadline = start.Add(tightDeadline)
	l.renewals.Add(1)
	return nil
}

func TestHoldKeepsTheBackendsDeadline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := &tight{inner: memlease.New()}
	h, err := aegis.Hold(ctx, l, "tight", time.Minute)
	require.NoError(t, err)
	defer h.Release(ctx)
	give := time.Now().Add(30 * time.Second)
	for l.renewals.Load() < 5 {
		require.NoError(t, h.Err(), "the lease was lost after %d renewals: Hold renewed on its TTL, past the deadline the backend set", l.renewals.Load())
		require.True(t, time.Now().Before(give), "five renewals did not happen within 30s")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, h.Err())
	require.WithinDuration(t, time.Now(), h.Lease().Deadline, tightDeadline, "Hold overruled the backend's deadline with its TTL's")
}
