package zklease_test

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/zklease"
)

func TestConnectAndNewValidate(t *testing.T) {
	t.Parallel()
	zkServers := testenv.ZKServers(t)
	for name, tt := range map[string]struct {
		servers []string
		timeout time.Duration
		want    string
	}{
		"zero timeout":     {zkServers, 0, "session timeout 0s is not positive"},
		"negative timeout": {zkServers, -time.Second, "session timeout -1s is not positive"},
		"sub-millisecond":  {zkServers, time.Microsecond, "session timeout 1µs is not positive"},
		"huge timeout":     {zkServers, 1000 * time.Hour, "does not fit ZooKeeper's int32 of milliseconds"},
		"no servers":       {nil, time.Second, "servers is empty"},
		"empty server":     {[]string{zkServers[0], " "}, time.Second, "servers[1] is empty"},
	} {
		conn, _, err := zklease.Connect(tt.servers, tt.timeout, zk.WithLogger(quiet{}))
		if conn != nil {
			conn.Close()
		}
		require.ErrorIs(t, err, aegis.ErrInvalid, name)
		require.ErrorContains(t, err, tt.want, name)
	}

	conn, _, err := zk.Connect(zkServers, sessionTimeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	for name, tt := range map[string]struct {
		conn *zk.Conn
		cfg  *zklease.Config
		want string
	}{
		"nil conn":         {nil, nil, "conn is nil"},
		"negative timeout": {conn, &zklease.Config{SessionTimeout: -time.Second}, "Config.SessionTimeout -1s is negative"},
		"relative root":    {conn, &zklease.Config{Root: "aegis"}, `Config.Root "aegis" must start with /`},
		"dot root":         {conn, &zklease.Config{Root: "/a/../b"}, `Config.Root "/a/../b" is not a valid ZooKeeper path`},
		"empty ACL":        {conn, &zklease.Config{ACL: []zk.ACL{}}, "Config.ACL is empty"},
		"negative max":     {conn, &zklease.Config{MaxTTL: -time.Second}, "Config.MaxTTL -1s is negative"},
	} {
		_, err := zklease.New(tt.conn, tt.cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, name)
		require.ErrorContains(t, err, tt.want, name)
	}
}

// TestStaleLeaseIsLost renews and releases a lease whose node is gone:
// after its own release, after a successor's grant from another Locker,
// and after its TTL passed with no successor. Each is ErrLost saying why,
// and a successor stays intact.
func TestStaleLeaseIsLost(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	zkServers := testenv.ZKServers(t)
	// Which reason a stale call reports depends on whether the TTL timer
	// had already forgotten the lease; any is right, none is missing.
	reason := regexp.MustCompile(`^zklease: (renew|release) "[^"]+": (not held through this Locker|node deleted or changed|ttl passed without renewal|session expired)`)
	check := func(t *testing.T, name string, err error, key string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrLost, name)
		require.ErrorContains(t, err, key, name)
		require.Regexp(t, reason, err.Error(), name)
	}

	t.Run("AfterOwnRelease", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a, _ := connect(t, zkServers, sessionTimeout, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx, lease))
		check(t, "renew", a.Renew(ctx, lease, ttl), key)
		check(t, "release", a.Release(ctx, lease), key)
	})

	t.Run("AfterSuccessor", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a, _ := connect(t, zkServers, sessionTimeout, nil)
		b, _ := connect(t, zkServers, sessionTimeout, nil)
		c, _ := connect(t, zkServers, sessionTimeout, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		var next *aegis.Lease
		require.Eventually(t, func() bool {
			next, err = b.TryAcquire(ctx, key, 10*ttl)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "the successor is granted the key after the first lease's TTL")
		check(t, "renew", a.Renew(ctx, lease, ttl), key)
		check(t, "release", a.Release(ctx, lease), key)
		_, err = c.TryAcquire(ctx, key, ttl)
		require.ErrorIs(t, err, aegis.ErrHeld, "the successor is intact")
		require.NoError(t, b.Renew(ctx, next, 10*ttl), "the successor still holds")
		require.NoError(t, b.Release(ctx, next))
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a, _ := connect(t, zkServers, sessionTimeout, nil)
		_, watcher := connect(t, zkServers, sessionTimeout, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		dir := "/aegis/lease/" + keypath.Segment(key)
		// The watcher's server may be a follower that has not applied the
		// grant yet, where an empty directory says nothing: each read
		// follows a sync, which brings that server up to the leader.
		require.Eventually(t, func() bool {
			if _, err := watcher.Sync(dir); err != nil {
				return false
			}
			children, _, err := watcher.Children(dir)
			return err == nil && len(children) == 0
		}, 10*time.Second, 10*time.Millisecond, "the node is deleted at its TTL")
		check(t, "renew", a.Renew(ctx, lease, ttl), key)
		check(t, "release", a.Release(ctx, lease), key)
		b, _ := connect(t, zkServers, sessionTimeout, nil)
		next, err := b.TryAcquire(ctx, key, ttl)
		require.NoError(t, err, "the stale calls left the key free")
		require.NoError(t, b.Release(ctx, next))
	})
}

// TestClosedPortSaysWhy: a Locker on a closed loopback port names the
// server and the refusal once its context ends, through Connect and
// through zk.Connect with a nil Config.
func TestClosedPortSaysWhy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	viaConnect, _ := connect(t, []string{addr}, sessionTimeout, nil)
	conn, _, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	viaNew, err := zklease.New(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, viaNew.Close())
		conn.Close()
	})
	for name, l := range map[string]*zklease.Locker{"Connect": viaConnect, "nil Config": viaNew} {
		for op, call := range map[string]func(context.Context) error{
			"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, testenv.Key(t), time.Second); return err },
			"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, testenv.Key(t), time.Second); return err },
		} {
			ctx, cancel := context.WithTimeout(bounded(t), 1500*time.Millisecond)
			err := call(ctx)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, name, op)
			require.ErrorContains(t, err, "no ZooKeeper session", name, op)
			require.ErrorContains(t, err, addr, name, op)
			require.ErrorContains(t, err, "connection refused", name, op)
		}
	}
}

// minSessionTimeout reads the minSessionTimeout of the server at addr.
func minSessionTimeout(t *testing.T, addr string) time.Duration {
	t.Helper()
	out, err := servers.ZooKeeperCommand(bounded(t), addr, "conf")
	require.NoError(t, err)
	m := regexp.MustCompile(`minSessionTimeout=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "conf answered %.400q", out)
	ms, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return time.Duration(ms) * time.Millisecond
}

// TestNilConfig runs Lockers made by New(conn, nil) on connections of
// zk.Connect to a server that will not list its sessions (cons): the
// session timeout bounding their TTLs and deadlines is the server's
// minSessionTimeout, learned by the Locker. With only MaxTTL raised (no
// event channel, no session timeout: polled and probed), a waiter is woken
// by its predecessor's release and deadlines follow the probed session
// timeout.
func TestNilConfig(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	zkServers := []string{consRefused(t, testenv.ZKServers(t)[0])}
	dconn, _, err := zk.Connect(zkServers, sessionTimeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	defaults, err := zklease.New(dconn, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, defaults.Close())
		dconn.Close()
	})
	_, err = defaults.TryAcquire(ctx, testenv.Key(t), time.Hour)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	least := minSessionTimeout(t, dconn.Server())
	require.ErrorContains(t, err, "ttl 1h0m0s is longer than "+least.String()+", the least session timeout the ZooKeeper ensemble grants")
	require.ErrorContains(t, err, "raise Config.MaxTTL")
	start := time.Now()
	short, err := defaults.TryAcquire(ctx, testenv.Key(t), least)
	require.NoError(t, err, "a TTL of the least session timeout")
	require.False(t, short.Deadline.After(start.Add(least)))

	newLocker := func() (*zklease.Locker, *zk.Conn) {
		conn, _, err := zk.Connect(zkServers, sessionTimeout, zk.WithLogger(quiet{}))
		require.NoError(t, err)
		l, err := zklease.New(conn, &zklease.Config{MaxTTL: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, l.Close())
			conn.Close()
		})
		return l, conn
	}
	a, conn := newLocker()
	b, _ := newLocker()
	key := testenv.Key(t)
	const ttl = 10 * time.Second
	// The first call learns the session timeout; time the second.
	warm, err := a.TryAcquire(ctx, key+"-warm", ttl)
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx, warm))
	start = time.Now()
	lease, err := a.TryAcquire(ctx, key, ttl)
	require.NoError(t, err)
	least = minSessionTimeout(t, conn.Server())
	require.Less(t, least, ttl, "the shared ensemble's minSessionTimeout is below the test's TTL")
	require.Equal(t, ttl, lease.TTL)
	require.False(t, lease.Deadline.After(start.Add(least)), "the deadline follows the least session timeout %s: it is %s after the start", least, lease.Deadline.Sub(start))
	require.True(t, lease.Deadline.After(time.Now()))
	_, err = b.TryAcquire(ctx, key, ttl)
	require.ErrorIs(t, err, aegis.ErrHeld)

	type result struct {
		lease *aegis.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, key, ttl)
		got <- result{l, err}
	}()
	renewed := time.Now()
	require.NoError(t, a.Renew(ctx, lease, ttl))
	require.False(t, lease.Deadline.After(renewed.Add(least)))
	require.NoError(t, a.Release(ctx, lease))
	select {
	case r := <-got:
		require.NoError(t, r.err)
		require.Greater(t, r.lease.Token, lease.Token)
		require.NoError(t, b.Release(ctx, r.lease))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the key within 10s of the release")
	}
}

// TestTTLLongerThanSession takes a lease whose TTL is ten times the
// session timeout, refused by default and taken with Config.MaxTTL raised:
// its deadline follows the session, renewals within each session timeout
// keep it trusted past the session timeout, and the key stays held for the
// TTL while the session lives.
func TestTTLLongerThanSession(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	zkServers := testenv.ZKServers(t)
	const timeout = 2 * time.Second
	const ttl = 10 * timeout
	a, _ := connect(t, zkServers, timeout, func(c *zklease.Config) { c.MaxTTL = time.Hour })
	b, _ := connect(t, zkServers, timeout, nil)
	key := testenv.Key(t)
	_, err := b.TryAcquire(ctx, key, ttl)
	require.ErrorIs(t, err, aegis.ErrInvalid, "by default")
	require.ErrorContains(t, err, "ttl 20s is longer than the ZooKeeper session timeout 2s")
	start := time.Now()
	lease, err := a.TryAcquire(ctx, key, ttl)
	require.NoError(t, err, "a TTL longer than the session timeout")
	require.Equal(t, ttl, lease.TTL)
	require.False(t, lease.Deadline.After(start.Add(timeout)), "the deadline follows the session")
	first := lease.Deadline

	// Renew every timeout/4 until twice the session timeout has passed.
	tick := time.NewTicker(timeout / 4)
	defer tick.Stop()
	for time.Since(start) < 2*timeout {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		renewed := time.Now()
		require.NoError(t, a.Renew(ctx, lease, ttl))
		require.False(t, lease.Deadline.After(renewed.Add(timeout)))
		require.True(t, lease.Deadline.After(time.Now()))
	}
	require.True(t, lease.Deadline.After(first.Add(timeout)), "renewals moved the deadline past the session timeout")

	// Unrenewed, the holder stops trusting the lease after a session
	// timeout, but the key stays held: the session lives, the TTL runs.
	stopped := lease.Deadline
	require.Eventually(t, func() bool { return time.Now().After(stopped.Add(timeout)) }, 2*timeout+time.Second, 10*time.Millisecond)
	_, err = b.TryAcquire(ctx, key, timeout)
	require.ErrorIs(t, err, aegis.ErrHeld, "the key is held for the TTL, beyond the session timeout")
	require.NoError(t, a.Renew(ctx, lease, ttl), "the lease is still there to renew")
	require.NoError(t, a.Release(ctx, lease))
	require.True(t, strings.HasPrefix(key, "TestTTLLongerThanSession"))
}

// bounded is a context that ends with the test or after a minute, so a
// hung call fails the test instead of the package's timeout.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
