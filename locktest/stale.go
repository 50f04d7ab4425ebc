package locktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

// requireStale checks that nothing a stale holder does with l counts: a
// renewal with the grant's own TTL (the backends' keep-alive path), one with
// another TTL, and a release each return ErrLost, from the Locker that
// granted l and from another instance, without a panic, and without the
// owner value in the error.
func (s *suite) requireStale(t *testing.T, ctx context.Context, granted, other aegis.Locker, l *aegis.Lease, when string) {
	t.Helper()
	for _, lk := range []struct {
		name string
		l    aegis.Locker
	}{{"granting locker", granted}, {"other locker", other}} {
		for _, ttl := range []time.Duration{l.TTL, 4 * s.cfg.TTL} {
			stale := *l
			var err error
			require.NotPanics(t, func() { err = lk.l.Renew(ctx, &stale, ttl) }, "renew %s from the %s", when, lk.name)
			require.ErrorIs(t, err, aegis.ErrLost, "renew with ttl %s %s from the %s", ttl, when, lk.name)
			require.NotContains(t, err.Error(), l.Owner, "the error shows the owner value")
		}
		stale := *l
		var err error
		require.NotPanics(t, func() { err = lk.l.Release(ctx, &stale) }, "release %s from the %s", when, lk.name)
		require.ErrorIs(t, err, aegis.ErrLost, "release %s from the %s", when, lk.name)
		require.NotContains(t, err.Error(), l.Owner, "the error shows the owner value")
	}
}

func (s *suite) staleAfterOwnRelease(t *testing.T) {
	ctx, k := s.ctx(t), key(t)
	a, b := s.cfg.New(t), s.cfg.New(t)
	la, err := a.TryAcquire(ctx, k, 4*s.cfg.TTL)
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx, la))
	s.requireStale(t, ctx, a, b, la, "after its own release")
	lb, err := b.TryAcquire(ctx, k, s.cfg.TTL)
	require.NoError(t, err, "the stale calls must not take the released key")
	require.Greater(t, lb.Token, la.Token)
	require.NoError(t, b.Release(ctx, lb))
}

func (s *suite) staleAfterSuccessor(t *testing.T) {
	ctx, k := s.ctx(t), key(t)
	a, b, c := s.cfg.New(t), s.cfg.New(t), s.cfg.New(t)
	la, err := a.TryAcquire(ctx, k, s.cfg.TTL)
	require.NoError(t, err)
	lb, _ := s.takeover(t, ctx, b, k, 8*s.cfg.TTL)
	s.requireStale(t, ctx, a, c, la, "after a successor's grant")
	_, err = c.TryAcquire(ctx, k, s.cfg.TTL)
	require.ErrorIs(t, err, aegis.ErrHeld, "the stale holder's calls must leave the successor intact")
	require.NoError(t, b.Renew(ctx, lb, 8*s.cfg.TTL), "the successor still holds")
	require.NoError(t, b.Release(ctx, lb))
}

// staleAfterExpiry lets a lease expire unrenewed. The expiry is observed by
// a successor's grant (the only portable proof that the store let the lease
// go), which is released at once, so the stale calls meet a key that
// expired and is free.
func (s *suite) staleAfterExpiry(t *testing.T) {
	ctx, k := s.ctx(t), key(t)
	a, b, c := s.cfg.New(t), s.cfg.New(t), s.cfg.New(t)
	la, err := a.TryAcquire(ctx, k, s.cfg.TTL)
	require.NoError(t, err)
	lb, _ := s.takeover(t, ctx, b, k, 4*s.cfg.TTL)
	require.NoError(t, b.Release(ctx, lb))
	s.requireStale(t, ctx, a, c, la, "after its expiry")
	lc, err := c.TryAcquire(ctx, k, s.cfg.TTL)
	require.NoError(t, err, "the stale calls must not take the expired key back")
	require.Greater(t, lc.Token, lb.Token)
	require.NoError(t, c.Release(ctx, lc))
}

// ownerHidden checks every printed form of a granted lease, of a Held, and
// of every error a caller can meet around it, for the owner value.
func (s *suite) ownerHidden(t *testing.T) {
	ctx, k := s.ctx(t), key(t)
	a, b := s.cfg.New(t), s.cfg.New(t)
	la, err := a.TryAcquire(ctx, k, s.cfg.TTL)
	require.NoError(t, err)
	require.NotEmpty(t, la.Owner)
	RequireHidden(t, la.Owner, la)
	RequireHidden(t, la.Owner, *la)
	_, err = b.TryAcquire(ctx, k, s.cfg.TTL)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NotContains(t, err.Error(), la.Owner, "ErrHeld shows the holder's owner value")

	lb, _ := s.takeover(t, ctx, b, k, 4*s.cfg.TTL)
	for _, err := range []error{a.Renew(ctx, la, la.TTL), a.Renew(ctx, la, 2*s.cfg.TTL), a.Release(ctx, la)} {
		require.ErrorIs(t, err, aegis.ErrLost)
		require.NotContains(t, err.Error(), la.Owner, "a stale call's error shows its owner value")
		require.NotContains(t, err.Error(), lb.Owner, "a stale call's error shows the successor's owner value")
	}
	require.NoError(t, b.Release(ctx, lb))

	h, err := aegis.Hold(ctx, a, k, s.cfg.TTL)
	require.NoError(t, err)
	RequireHidden(t, h.Lease().Owner, h)
	RequireHidden(t, h.Lease().Owner, h.Lease())
	require.NoError(t, h.Release(ctx))
}

// greedyHolder runs one instance in a loop of Hold, a short critical section
// and Release, acquiring again at once, while another instance waits in
// aegis.Acquire: the waiter must get the key within Config.Handoff. A
// backend that only polls loses every race to the holder's immediate
// re-acquire and starves its waiters.
func (s *suite) greedyHolder(t *testing.T) {
	ctx, k := s.ctx(t), key(t)
	greedy, waiter := s.cfg.New(t), s.cfg.New(t)
	h, err := aegis.Hold(ctx, greedy, k, s.cfg.TTL)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loopErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			time.Sleep(5 * time.Millisecond) // the critical section
			if err := h.Release(ctx); err != nil {
				loopErr = err
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			next, err := aegis.Hold(ctx, greedy, k, s.cfg.TTL)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					loopErr = err
				}
				return
			}
			h = next // only this goroutine uses h from here on
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Handoff)
	defer cancel()
	start := time.Now()
	lw, err := aegis.Acquire(wctx, waiter, k, s.cfg.TTL)
	waited := time.Since(start)
	close(stop)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	if err == nil {
		require.NoError(t, waiter.Release(ctx, lw))
	}
	select {
	case <-finished:
	case <-time.After(s.bound()):
		t.Fatalf("the greedy holder's loop did not stop within %s", s.bound())
	}
	require.NoError(t, loopErr, "the greedy holder's loop")
	require.NoError(t, err, "a waiter was kept out for %s by a holder that releases every 5ms", waited.Round(time.Millisecond))
}

// waiterLeaves checks that a waiter that gave up (its context ended) leaves
// nothing behind in the store's queue: once the holder releases, the key is
// free to the next TryAcquire within half a TTL. A queue entry left by a
// waiter that is gone would hold a free key for its whole expiry.
func (s *suite) waiterLeaves(t *testing.T) {
	ctx, k := s.ctx(t), key(t)
	a, b := s.cfg.New(t), s.cfg.New(t)
	free := func(l aegis.Locker, what string) *aegis.Lease {
		t.Helper()
		var got *aegis.Lease
		give := time.Now().Add(s.cfg.TTL / 2)
		for {
			lease, err := l.TryAcquire(ctx, k, 4*s.cfg.TTL)
			if err == nil {
				got = lease
				break
			}
			require.ErrorIs(t, err, aegis.ErrHeld)
			require.True(t, time.Now().Before(give), "%s: the key was still held %s after its release", what, s.cfg.TTL/2)
			time.Sleep(s.poll())
		}
		return got
	}

	la, err := a.TryAcquire(ctx, k, 20*s.cfg.TTL)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, s.cfg.TTL/2)
	_, err = aegis.Acquire(short, b, k, s.cfg.TTL)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, a.Release(ctx, la))
	la = free(a, "a waiter that gave up")
	require.NoError(t, a.Release(ctx, la))
}
