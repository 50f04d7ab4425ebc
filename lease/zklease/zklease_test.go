package zklease_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/zklease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet drops zk's log lines (connected, authenticated, …).
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// sessionTimeout is the session timeout the tests ask the shared ensemble
// for; it bounds their leases' deadlines.
const sessionTimeout = 30 * time.Second

// connect connects to servers through zklease.Connect, closing the
// connection and the Locker with the test.
func connect(t testing.TB, servers []string, timeout time.Duration, cfg func(*zklease.Config)) (*zklease.Locker, *zk.Conn) {
	t.Helper()
	conn, c, err := zklease.Connect(servers, timeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	if cfg != nil {
		cfg(c)
	}
	l, err := zklease.New(conn, c)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, l.Close())
		conn.Close()
	})
	return l, conn
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	locktest.Run(t, locktest.Config{
		New: func(t *testing.T) aegis.Locker {
			l, _ := connect(t, testenv.ZKServers(t), sessionTimeout, nil)
			return l
		},
		// The TTL is the Locker's timer; by default the session timeout
		// bounds it.
		TTL:    time.Second,
		MaxTTL: sessionTimeout,
		// 5s, not the default TTL+1s: on a freshly installed ensemble (a
		// cold JVM) a client's reconnect cost a waiter over 2s once. A
		// waiter a greedy holder starves waits forever, so 5s still tells.
		Handoff: 5 * time.Second,
	})
}

// TestTokenIsCzxid: the token of a grant is its node's czxid, whether the
// create's own answer granted it (a lone child) or the grant came after a
// wait, and the node is an ephemeral of the Locker's session.
func TestTokenIsCzxid(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	servers := testenv.ZKServers(t)
	a, aConn := connect(t, servers, sessionTimeout, nil)
	b, bConn := connect(t, servers, sessionTimeout, nil)
	key := testenv.Key(t)
	check := func(name string, lease *aegis.Lease, conn *zk.Conn) {
		t.Helper()
		exists, stat, err := conn.Exists("/aegis/lease/" + keypath.Segment(key) + "/" + lease.Owner)
		require.NoError(t, err, name)
		require.True(t, exists, name)
		require.EqualValues(t, stat.Czxid, lease.Token, "%s: the token is the node's czxid", name)
		require.Equal(t, conn.SessionID(), stat.EphemeralOwner, "%s: the node is the session's", name)
	}
	first, err := a.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err)
	check("lone child", first, aConn)
	_, dir, err := aConn.Exists("/aegis/lease/" + keypath.Segment(key))
	require.NoError(t, err)
	require.EqualValues(t, 1, dir.Version, "the create went in a multi with a setData of the lock node")

	got := make(chan *aegis.Lease, 1)
	failed := make(chan error, 1)
	go func() {
		lease, err := b.Acquire(ctx, key, time.Second)
		if err != nil {
			failed <- err
			return
		}
		got <- lease
	}()
	require.Eventually(t, func() bool {
		children, _, err := aConn.Children("/aegis/lease/" + keypath.Segment(key))
		return err == nil && len(children) == 2
	}, 10*time.Second, 5*time.Millisecond, "the waiter queues")
	require.NoError(t, a.Release(ctx, first))
	select {
	case second := <-got:
		check("after a wait", second, bConn)
		require.Greater(t, second.Token, first.Token)
		require.NoError(t, b.Release(ctx, second))
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the key within 10 s of the release")
	}
}

// TestNoWriteACLFallsBack: with an ACL that refuses setData on the lock
// node, the create goes alone (no multi) and the grant still works, with
// the node's czxid as its token.
func TestNoWriteACLFallsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := "/" + testenv.Key(t)
	l, conn := connect(t, testenv.ZKServers(t), sessionTimeout, func(c *zklease.Config) {
		c.Root = root
		c.ACL = zk.WorldACL(zk.PermCreate | zk.PermDelete | zk.PermRead)
	})
	key := "k"
	lease, err := l.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err)
	_, stat, err := conn.Exists(root + "/" + key + "/" + lease.Owner)
	require.NoError(t, err)
	require.EqualValues(t, stat.Czxid, lease.Token)
	_, stat, err = conn.Exists(root + "/" + key)
	require.NoError(t, err)
	require.Zero(t, stat.Version, "no setData reached the lock node")
	_, err = l.TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, l.Renew(ctx, lease, time.Second))
	require.NoError(t, l.Release(ctx, lease))
	again, err := l.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err)
	require.Greater(t, again.Token, lease.Token)
	require.NoError(t, l.Release(ctx, again))
}
