// Package losstest holds scenarios that backends' tests run: Contend, many
// goroutines of one Locker on one key; and the cluster scenarios that the consensus backends
// (etcdlease, zklease) run against private clusters: a holder cut off from
// its cluster, and a waiter whose place in the queue expires while it is
// cut off. The backend test supplies the Lockers and the means to cut one
// off (a tcpproxy between that Locker's client and the servers).
package losstest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/losswatch"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// CutOff describes the cut-off scenario.
type CutOff struct {
	// Holder is the Locker that is cut off; Successor and the others talk
	// to the cluster directly.
	Holder, Successor aegis.Locker
	// Cut cuts Holder's client off from every server; Heal undoes it.
	Cut, Heal func()
	// TTL is the holder's lease TTL.
	TTL time.Duration
	// Bound is how long the successor may take to be granted the key after
	// the cut (the backend's expiry: a TTL, or a session timeout, plus
	// margins).
	Bound time.Duration
}

// RunCutOff holds a key through Holder with aegis.Hold and writes through
// the fence with its token; Successor waits for the key in aegis.Acquire;
// then the holder is cut off. It checks that the holder's Held.Context() is
// cancelled before the successor is granted the key (allowing for the
// lateness of this process's timers: see internal/losswatch), that the
// successor's token is greater, and that after the heal the old holder's
// fenced write is rejected while the successor's went through. It returns
// the time from the cut to the cancellation (the detection time).
func RunCutOff(t *testing.T, c CutOff) time.Duration {
	t.Helper()
	ctx := t.Context()
	key := testenv.Key(t)
	pool := testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	write := func(token aegis.Token) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return fence.Check(ctx, tx, key, token)
		})
	}

	h, err := aegis.Hold(ctx, c.Holder, key, c.TTL)
	require.NoError(t, err)
	require.NoError(t, write(h.Token()), "the holder writes while it holds")
	type grant struct {
		lease *aegis.Lease
		at    time.Time
		done  bool // the holder's context, when the grant returned
		err   error
	}
	granted := make(chan grant, 1)
	actx, stop := context.WithTimeout(ctx, c.Bound+time.Minute)
	defer stop()
	go func() {
		l, err := aegis.Acquire(actx, c.Successor, key, c.TTL)
		done := h.Context().Err() != nil
		granted <- grant{l, time.Now(), done, err}
	}()

	cut := time.Now()
	c.Cut()
	w := losswatch.Start(t, h) // cut off: no renewal succeeds any more
	g := testenv.Recv(t, granted, c.Bound, "the successor's grant after the cut")
	require.NoError(t, g.err)
	at := w.Require(t, g.at, g.done, c.Bound)
	require.ErrorIs(t, context.Cause(h.Context()), aegis.ErrLost)
	require.Greater(t, g.lease.Token, h.Token(), "the successor's token")
	require.NoError(t, write(g.lease.Token), "the successor writes")
	detect := at.Sub(cut)
	t.Logf("cut-off holder: context cancelled %s after the cut (TTL %s); successor granted %s after the cut, %s after the cancellation",
		detect.Round(time.Millisecond), c.TTL, g.at.Sub(cut).Round(time.Millisecond), g.at.Sub(at).Round(time.Millisecond))

	c.Heal()
	// The old holder resumes and writes with its token: the fence refuses.
	require.ErrorIs(t, write(h.Token()), aegis.ErrStale, "the old holder's fenced write after it resumes")
	require.ErrorIs(t, h.Err(), aegis.ErrLost)
	rctx, rcancel := context.WithTimeout(ctx, c.Bound)
	defer rcancel()
	require.ErrorIs(t, h.Release(rctx), aegis.ErrLost, "the old holder's release changes nothing")
	require.NoError(t, c.Successor.Release(ctx, g.lease), "the successor still holds")
	return detect
}

// Campaign describes the scenario of a waiter that outlives its place in
// the queue.
type Campaign struct {
	// Waiter is the Locker that waits in Acquire and is cut off; Holder and
	// Third talk to the cluster directly.
	Waiter, Holder, Third aegis.Locker
	Cut, Heal             func()
	// TTL is the waiter's lease TTL; HoldTTL the holder's and the third's,
	// long enough to outlast the scenario.
	TTL, HoldTTL time.Duration
	// Entries counts the entries of key's queue in the store (the holder's
	// and the waiters'), read directly.
	Entries func(ctx context.Context, key string) (int, error)
	// Bound bounds each wait for the store to change.
	Bound time.Duration
}

// RunCampaign checks that an Acquire whose queue entry expired while its
// client was cut off does not report success when it comes back: Holder
// holds the key, Waiter queues behind it, Waiter is cut off until its entry
// expires, Holder releases and Third is granted the key, then Waiter's
// client comes back and sees its predecessor gone. Waiter must queue again
// (a new entry appears), stay blocked while Third holds, and be granted the
// key only after Third releases, with a greater token.
func RunCampaign(t *testing.T, c Campaign) {
	t.Helper()
	ctx := t.Context()
	key := testenv.Key(t)
	entries := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool {
			n, err := c.Entries(ctx, key)
			return err == nil && n == want
		}, c.Bound, 10*time.Millisecond, "waiting for %d entries in the queue of %q", want, key)
	}
	lh, err := c.Holder.TryAcquire(ctx, key, c.HoldTTL)
	require.NoError(t, err)
	type result struct {
		lease *aegis.Lease
		err   error
	}
	got := make(chan result, 1)
	wctx, stop := context.WithTimeout(ctx, 4*c.Bound+time.Minute)
	defer stop()
	go func() {
		l, err := aegis.Acquire(wctx, c.Waiter, key, c.TTL)
		got <- result{l, err}
	}()
	entries(2) // the holder and the waiter

	c.Cut()
	entries(1) // the waiter's entry expired with its lease or session
	require.NoError(t, c.Holder.Release(ctx, lh))
	lt, err := c.Third.TryAcquire(ctx, key, c.HoldTTL)
	require.NoError(t, err, "the key is free: the waiter's entry is gone")
	c.Heal()

	// The waiter queues again, behind the third; an Acquire that returns
	// meanwhile (granted, or given up) is the failure, named as such.
	var early *result
	require.Eventually(t, func() bool {
		select {
		case r := <-got:
			early = &r
			return true
		default:
		}
		n, err := c.Entries(ctx, key)
		return err == nil && n == 2
	}, c.Bound, 10*time.Millisecond, "waiting for the waiter to queue again behind the third in %q", key)
	if early != nil {
		t.Fatalf("Acquire returned (lease %v, err %v) while the third holds the key: a campaign that outlived its lease must queue again and wait", early.lease, early.err)
	}
	require.NoError(t, c.Third.Release(ctx, lt))
	select {
	case r := <-got:
		require.NoError(t, r.err)
		require.Greater(t, r.lease.Token, lt.Token, "the waiter's new token")
		require.NoError(t, c.Waiter.Renew(ctx, r.lease, c.TTL), "the grant is real")
		require.NoError(t, c.Waiter.Release(ctx, r.lease))
	case <-time.After(c.Bound):
		t.Fatalf("the waiter was not granted the key within %s of the third's release", c.Bound)
	}
}
