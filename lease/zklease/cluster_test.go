package zklease_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/testing/losstest"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/zklease"
)

// TestCluster runs the destructive scenarios on a private 3-member
// ensemble (200 ms tick: sessions of 400 ms to 60 s), one after the other.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ensemble, err := servers.StartZooKeeper(ctx, t.TempDir(), &servers.ZooKeeperConfig{Members: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ensemble.Stop() })
	direct := func(t *testing.T, timeout time.Duration) (*zklease.Locker, *zk.Conn) {
		return connect(t, ensemble.Addrs(), timeout, nil)
	}

	t.Run("LeaseSurvivesFollowerThenLeaderLoss", func(t *testing.T) {
		const ttl = 4 * time.Second
		holder, conn := direct(t, 2*ttl)
		other, _ := direct(t, 2*ttl)
		key := testenv.Key(t)
		h, err := aegis.Hold(ctx, holder, key, ttl)
		require.NoError(t, err)
		defer h.Release(ctx)
		session := conn.SessionID()
		for _, role := range []string{"follower", "leader"} {
			leader, err := ensemble.Leader(ctx)
			require.NoError(t, err)
			victim := leader
			if role == "follower" {
				for _, m := range ensemble.Members() {
					// The follower the holder talks to, if it talks to one.
					if m != leader && (victim == leader || m.Addr() == conn.Server()) {
						victim = m
					}
				}
			}
			killed := time.Now()
			require.NoError(t, victim.Kill())
			if role == "leader" {
				require.Eventually(t, func() bool {
					l, err := ensemble.Leader(ctx)
					return err == nil && l != victim
				}, 60*time.Second, 20*time.Millisecond, "a new leader")
			}
			require.Eventually(t, func() bool { return h.Err() != nil || h.Lease().Deadline.After(killed.Add(ttl+ttl/3)) },
				30*time.Second, 10*time.Millisecond, "renewals after the %s was killed", role)
			require.NoError(t, h.Err(), "the lease survives the loss of the %s", role)
			_, err = other.TryAcquire(ctx, key, ttl)
			require.ErrorIs(t, err, aegis.ErrHeld, "after the loss of the %s", role)
			require.NoError(t, ensemble.Heal(ctx))
		}
		require.Equal(t, session, conn.SessionID(), "the same session throughout")
		require.NoError(t, h.Release(ctx))
	})

	// proxied is a Locker whose connection reaches every member through a
	// proxy of its own, and the functions that cut and heal them all.
	proxied := func(t *testing.T, timeout time.Duration, cfg ...func(*zklease.Config)) (*zklease.Locker, *zk.Conn, func(), func()) {
		var proxies []*tcpproxy.Proxy
		var addrs []string
		for _, m := range ensemble.Members() {
			p, err := tcpproxy.New(m.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		var set func(*zklease.Config)
		if len(cfg) > 0 {
			set = cfg[0]
		}
		l, conn := connect(t, addrs, timeout, set)
		each := func(f func(*tcpproxy.Proxy)) func() {
			return func() {
				for _, p := range proxies {
					f(p)
				}
			}
		}
		return l, conn, each((*tcpproxy.Proxy).Cut), each((*tcpproxy.Proxy).Heal)
	}

	t.Run("CutOffHolderStopsBeforeSuccessor", func(t *testing.T) {
		const timeout = 3 * time.Second
		holder, conn, cut, heal := proxied(t, timeout)
		successor, _ := direct(t, timeout)
		session := conn.SessionID()
		losstest.RunCutOff(t, losstest.CutOff{
			Holder: holder, Successor: successor,
			Cut: cut, Heal: heal,
			TTL: timeout,
			// The session expires a session timeout after the ensemble last
			// heard from the holder.
			Bound: 3*timeout + 10*time.Second,
		})
		// The holder's client reconnected on a new session: nothing it held
		// before can be renewed on it.
		require.Eventually(t, func() bool {
			return conn.State() == zk.StateHasSession && conn.SessionID() != session
		}, 30*time.Second, 10*time.Millisecond, "a new session after the expiry")
	})

	t.Run("RenewFailsOnANewSession", func(t *testing.T) {
		const timeout = 2 * time.Second
		holder, conn, cut, heal := proxied(t, timeout)
		key := testenv.Key(t)
		lease, err := holder.TryAcquire(ctx, key, timeout)
		require.NoError(t, err)
		session := conn.SessionID()
		cut()
		observer, _ := direct(t, timeout)
		// The session expires and the ensemble deletes the node.
		require.Eventually(t, func() bool {
			l, err := observer.TryAcquire(ctx, key, timeout)
			if err == nil {
				require.NoError(t, observer.Release(ctx, l))
			}
			return err == nil
		}, 30*time.Second, 50*time.Millisecond, "the key is freed by the session's expiry")
		heal()
		require.Eventually(t, func() bool {
			return conn.State() == zk.StateHasSession && conn.SessionID() != session
		}, 30*time.Second, 10*time.Millisecond, "the client reconnects on a new session")
		require.ErrorIs(t, holder.Renew(ctx, lease, timeout), aegis.ErrLost, "renew on the new session")
		require.ErrorIs(t, holder.Release(ctx, lease), aegis.ErrLost, "release on the new session")
	})

	t.Run("CutOffHolderWithATTLLongerThanItsSession", func(t *testing.T) {
		ctx := bounded(t)
		// A TTL of 15 session timeouts: the session's expiry frees the key,
		// and the holder's deadline has passed by then.
		const timeout = 2 * time.Second
		const ttl = 15 * timeout
		holder, conn, cut, heal := proxied(t, timeout, func(c *zklease.Config) { c.MaxTTL = time.Hour })
		successor, _ := direct(t, timeout)
		key := testenv.Key(t)
		lease, err := holder.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		session := conn.SessionID()
		cut()
		var granted *aegis.Lease
		require.Eventually(t, func() bool {
			granted, err = successor.TryAcquire(ctx, key, timeout)
			return err == nil
		}, 20*time.Second, 10*time.Millisecond, "the session's expiry frees the key")
		at := time.Now()
		require.False(t, at.Before(lease.Deadline), "the successor was granted the key %s before the holder's deadline", lease.Deadline.Sub(at))
		require.True(t, at.Before(lease.Deadline.Add(ttl/2)), "the session, not the TTL, ended the lease")
		require.Greater(t, granted.Token, lease.Token)
		heal()
		require.Eventually(t, func() bool {
			return conn.State() == zk.StateHasSession && conn.SessionID() != session
		}, 30*time.Second, 10*time.Millisecond, "the holder reconnects on a new session")
		err = holder.Renew(ctx, lease, ttl)
		require.ErrorIs(t, err, aegis.ErrLost)
		require.ErrorContains(t, err, "session expired")
		require.NoError(t, successor.Renew(ctx, granted, timeout), "the successor is intact")
		require.NoError(t, successor.Release(ctx, granted))
	})

	t.Run("NoEventChannelWaitsOutADisconnection", func(t *testing.T) {
		ctx := bounded(t)
		// Without an event channel the Locker polls the connection's state:
		// a Renew that started while the connection was down succeeds once
		// it is back on the same session.
		var proxies []*tcpproxy.Proxy
		var addrs []string
		for _, m := range ensemble.Members() {
			p, err := tcpproxy.New(m.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		conn, _, err := zk.Connect(addrs, 20*time.Second, zk.WithLogger(quiet{}))
		require.NoError(t, err)
		// No Events and no SessionTimeout: polled, and probed.
		holder, err := zklease.New(conn, &zklease.Config{MaxTTL: time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, holder.Close())
			conn.Close()
		})
		key := testenv.Key(t)
		lease, err := holder.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		session := conn.SessionID()
		for _, p := range proxies {
			p.Cut()
		}
		require.Eventually(t, func() bool { return conn.State() != zk.StateHasSession }, 20*time.Second, time.Millisecond, "the client sees the cut")
		done := make(chan error, 1)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		go func() { done <- holder.Renew(rctx, lease, 10*time.Second) }()
		for _, p := range proxies {
			p.Heal()
		}
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("the Renew was not woken within 15s of the heal")
		}
		require.Equal(t, session, conn.SessionID(), "the same session")
		require.NoError(t, holder.Release(ctx, lease))
	})

	t.Run("CampaignThatOutlivesItsSessionDoesNotWin", func(t *testing.T) {
		const timeout = 2 * time.Second
		waiter, _, cut, heal := proxied(t, timeout)
		holder, conn := direct(t, 30*time.Second)
		third, _ := direct(t, 30*time.Second)
		losstest.RunCampaign(t, losstest.Campaign{
			Waiter: waiter, Holder: holder, Third: third,
			Cut: cut, Heal: heal,
			TTL: timeout, HoldTTL: 30 * time.Second,
			Entries: func(ctx context.Context, key string) (int, error) {
				children, _, err := conn.Children("/aegis/lease/" + keypath.Segment(key))
				return len(children), err
			},
			Bound: 20 * time.Second,
		})
	})
}
