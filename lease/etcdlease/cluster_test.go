package etcdlease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/losstest"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/etcdlease"
)

// TestCluster runs the destructive scenarios on a private 3-member cluster
// (50 ms heartbeat, 500 ms election timeout: a 1 s minimum lease TTL), one
// after the other.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cluster, err := servers.StartEtcd(ctx, t.TempDir(), &servers.EtcdConfig{Members: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	direct := func(t *testing.T) *etcdlease.Locker {
		l, err := etcdlease.New(client(t, cluster.Endpoints()), nil)
		require.NoError(t, err)
		return l
	}

	t.Run("LeaseSurvivesFollowerThenLeaderLoss", func(t *testing.T) {
		// Several election timeouts: on a loaded machine a 500 ms
		// election timeout misses heartbeats, and the cluster may elect
		// more than once before it settles (a 3 s TTL ran out in one such
		// run, load 19 on 2 cores).
		const ttl = 6 * time.Second
		holder, other := direct(t), direct(t)
		key := testenv.Key(t)
		h, err := aegis.Hold(ctx, holder, key, ttl)
		require.NoError(t, err)
		defer h.Release(ctx)
		for _, role := range []string{"follower", "leader"} {
			leader, err := cluster.Leader(ctx)
			require.NoError(t, err)
			victim := leader
			if role == "follower" {
				for _, m := range cluster.Members() {
					if m != leader {
						victim = m
						break
					}
				}
			}
			killed := time.Now()
			require.NoError(t, victim.Kill())
			if role == "leader" {
				require.Eventually(t, func() bool {
					l, err := cluster.Leader(ctx)
					return err == nil && l != victim
				}, 30*time.Second, 20*time.Millisecond, "a new leader")
			}
			// Two renewals that started after the kill have succeeded.
			require.Eventually(t, func() bool { return h.Err() != nil || h.Lease().Deadline.After(killed.Add(ttl+ttl/3)) },
				4*ttl, 10*time.Millisecond, "renewals after the %s was killed", role)
			require.NoError(t, h.Err(), "the lease survives the loss of the %s", role)
			_, err = other.TryAcquire(ctx, key, ttl)
			require.ErrorIs(t, err, aegis.ErrHeld, "after the loss of the %s", role)
			require.NoError(t, cluster.Heal(ctx))
		}
		require.NoError(t, h.Release(ctx))
	})

	// proxied is a Locker whose client reaches every member through a proxy
	// of its own, and the functions that cut and heal them all.
	proxied := func(t *testing.T, cfg *etcdlease.Config) (*etcdlease.Locker, func(), func()) {
		var proxies []*tcpproxy.Proxy
		var endpoints []string
		for _, m := range cluster.Members() {
			p, err := tcpproxy.New(m.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			proxies = append(proxies, p)
			endpoints = append(endpoints, "http://"+p.Addr())
		}
		l, err := etcdlease.New(client(t, endpoints), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		each := func(f func(*tcpproxy.Proxy)) func() {
			return func() {
				for _, p := range proxies {
					f(p)
				}
			}
		}
		return l, each((*tcpproxy.Proxy).Stall), each((*tcpproxy.Proxy).Heal)
	}

	t.Run("CutOffHolderStopsBeforeSuccessor", func(t *testing.T) {
		holder, cut, heal := proxied(t, nil)
		const ttl = 2 * time.Second
		losstest.RunCutOff(t, losstest.CutOff{
			Holder: holder, Successor: direct(t),
			Cut: cut, Heal: heal,
			TTL: ttl,
			// The etcd lease expires TTL after the last renewal; the
			// leader looks for expired leases every 500 ms.
			Bound: 3*ttl + 5*time.Second,
		})
	})

	t.Run("CampaignThatOutlivesItsLeaseDoesNotWin", func(t *testing.T) {
		waiter, cut, heal := proxied(t, nil)
		c := client(t, cluster.Endpoints())
		losstest.RunCampaign(t, losstest.Campaign{
			Waiter: waiter, Holder: direct(t), Third: direct(t),
			Cut: cut, Heal: heal,
			TTL: time.Second, HoldTTL: time.Minute,
			Entries: func(ctx context.Context, key string) (int, error) {
				resp, err := c.Get(ctx, "aegis/lease/"+key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					return 0, err
				}
				return int(resp.Count), nil
			},
			Bound: 15 * time.Second,
		})
	})
}

// TestClusterSession runs the cut-off scenarios with the cut-off Locker in
// session mode (a 2 s session) on a private 3-member cluster; the others
// are in per-grant mode on the same keys.
func TestClusterSession(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cluster, err := servers.StartEtcd(ctx, t.TempDir(), &servers.EtcdConfig{Members: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	direct := func(t *testing.T) *etcdlease.Locker {
		l, err := etcdlease.New(client(t, cluster.Endpoints()), nil)
		require.NoError(t, err)
		return l
	}
	proxied := func(t *testing.T) (*etcdlease.Locker, func(), func()) {
		var proxies []*tcpproxy.Proxy
		var endpoints []string
		for _, m := range cluster.Members() {
			p, err := tcpproxy.New(m.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			proxies = append(proxies, p)
			endpoints = append(endpoints, "http://"+p.Addr())
		}
		l, err := etcdlease.New(client(t, endpoints), &etcdlease.Config{Session: true, SessionTTL: 2 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		each := func(f func(*tcpproxy.Proxy)) func() {
			return func() {
				for _, p := range proxies {
					f(p)
				}
			}
		}
		return l, each((*tcpproxy.Proxy).Stall), each((*tcpproxy.Proxy).Heal)
	}

	t.Run("CutOffHolderStopsBeforeSuccessor", func(t *testing.T) {
		holder, cut, heal := proxied(t)
		const ttl = 2 * time.Second
		losstest.RunCutOff(t, losstest.CutOff{
			Holder: holder, Successor: direct(t),
			Cut: cut, Heal: heal,
			TTL: ttl,
			// The session's etcd lease expires SessionTTL after the last
			// keep-alive; the leader looks for expired leases every 500 ms.
			Bound: 3*ttl + 5*time.Second,
		})
	})

	t.Run("CampaignThatOutlivesItsSessionDoesNotWin", func(t *testing.T) {
		waiter, cut, heal := proxied(t)
		c := client(t, cluster.Endpoints())
		losstest.RunCampaign(t, losstest.Campaign{
			Waiter: waiter, Holder: direct(t), Third: direct(t),
			Cut: cut, Heal: heal,
			TTL: time.Second, HoldTTL: time.Minute,
			Entries: func(ctx context.Context, key string) (int, error) {
				resp, err := c.Get(ctx, "aegis/lease/"+key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					return 0, err
				}
				return int(resp.Count), nil
			},
			Bound: 15 * time.Second,
		})
	})
}

// TestMinimumTTL runs a member with etcd's default timings (100 ms
// heartbeat, 1 s election timeout), whose minimum lease TTL is 2 s: a 1 s
// TTL is refused with an error naming the minimum, at once the second time.
func TestMinimumTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cluster, err := servers.StartEtcd(ctx, t.TempDir(), &servers.EtcdConfig{
		Members: 1, HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	c := client(t, cluster.Endpoints())
	l, err := etcdlease.New(c, nil)
	require.NoError(t, err)
	key := testenv.Key(t)
	for range 2 {
		_, err = l.TryAcquire(ctx, key, time.Second)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, "ttl 1s is below this etcd cluster's minimum lease TTL of 2 s")
		_, err = l.Acquire(ctx, key, 500*time.Millisecond)
		require.ErrorIs(t, err, aegis.ErrInvalid)
	}
	leases, err := c.Leases(ctx)
	require.NoError(t, err)
	require.Empty(t, leases.Leases, "the raised lease was revoked")
	lease, err := l.TryAcquire(ctx, key, 2*time.Second)
	require.NoError(t, err)
	require.ErrorIs(t, l.Renew(ctx, lease, time.Second), aegis.ErrInvalid)
	require.NoError(t, l.Renew(ctx, lease, 2*time.Second), "the refused renewal lost nothing")
	require.NoError(t, l.Release(ctx, lease))
	require.True(t, strings.HasPrefix(key, "TestMinimumTTL"))
}
