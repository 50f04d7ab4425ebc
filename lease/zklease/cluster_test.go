package zklease_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/losstest"
	"github.com/aegislab/aegis/internal/servers"
	"github.com/aegislab/aegis/internal/tcpproxy"
	"github.com/aegislab/aegis/internal/testenv"
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
	proxied := func(t *testing.T, timeout time.Duration) (*zklease.Locker, *zk.Conn, func(), func()) {
		var proxies []*tcpproxy.Proxy
		var addrs []string
		for _, m := range ensemble.Members() {
			p, err := tcpproxy.New(m.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		l, conn := connect(t, addrs, timeout, nil)
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
