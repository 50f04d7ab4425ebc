package redlock_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/servers"
	"github.com/aegislab/aegis/internal/testenv"
	"github.com/aegislab/aegis/lease/redlock"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// nodes are the shared Redlock nodes: the test Redis servers but the first
// (the single-node one).
func nodes(t testing.TB) []string {
	addrs := testenv.RedisAddrs(t)
	require.GreaterOrEqual(t, len(addrs), 6, "AEGIS_REDIS_ADDRS: the shared set has six servers, five of them for Redlock")
	return addrs[1:6]
}

// clients are clients of their own on addrs, closed with the test. A
// refused connection is not dialled again.
func clients(t testing.TB, addrs []string) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs
}

func locker(t testing.TB, cs []redis.UniversalClient, cfg *redlock.Config) *redlock.Locker {
	l, err := redlock.New(cs, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func prefix(t testing.TB) string { return "aegis-test:" + testenv.Key(t) + ":" }

func TestLocktest(t *testing.T) {
	t.Parallel()
	addrs := nodes(t)
	p := prefix(t)
	locktest.Run(t, locktest.Config{
		New: func(t *testing.T) aegis.Locker {
			// Generous node timeouts: the machine is shared with other tests.
			return locker(t, clients(t, addrs), &redlock.Config{Prefix: p, NodeTimeout: time.Second})
		},
		TTL: 300 * time.Millisecond,
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	tests := []struct {
		name  string
		nodes []redis.UniversalClient
		cfg   *redlock.Config
		want  string
	}{
		{"no nodes", nil, nil, "redlock: no nodes"},
		{"nil node", []redis.UniversalClient{c, nil}, nil, "redlock: node 1 is nil"},
		{"brace", []redis.UniversalClient{c}, &redlock.Config{Prefix: "{"}, `redlock: Config.Prefix "{" holds '{', '}' or NUL`},
		{"negative timeout", []redis.UniversalClient{c}, &redlock.Config{NodeTimeout: -time.Second}, "redlock: Config.NodeTimeout -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redlock.New(tt.nodes, tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
	for n, quorum := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		cs := make([]redis.UniversalClient, n)
		for i := range cs {
			cs[i] = c
		}
		l, err := redlock.New(cs, nil)
		require.NoError(t, err)
		require.Equal(t, quorum, l.Quorum(), "%d nodes", n)
	}
}

// TestTokenIsTheMaximum: the token is the greatest counter of the granting
// nodes, and the lagging nodes are raised to it, so a later majority that
// avoids the node with the greatest counter still continues the order.
func TestTokenIsTheMaximum(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cs := clients(t, nodes(t))
	p := prefix(t)
	l := locker(t, cs, &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	lock, fence := "{"+p+"job}", "{"+p+"job}:fence"
	t.Cleanup(func() {
		for _, c := range cs {
			c.Del(context.Background(), lock, fence)
		}
	})
	require.NoError(t, cs[0].Set(ctx, fence, 100, 0).Err(), "node 0 ran ahead (grants of failed attempts, say)")

	first, err := l.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 101, first.Token)
	for i, c := range cs {
		require.Equal(t, "101", c.Get(ctx, fence).Val(), "node %d raised to the token", i)
	}
	require.NoError(t, l.Release(ctx, first))

	// Node 0 is held by someone else: the next majority is nodes 1-4.
	require.NoError(t, cs[0].Set(ctx, lock, "someone", time.Minute).Err())
	second, err := l.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 102, second.Token, "without the raise, nodes 1-4 would have counted 2")
	require.Equal(t, "someone", cs[0].Get(ctx, lock).Val(), "another owner's key is left alone")
	require.NoError(t, l.Release(ctx, second))
}

// TestFailedAttemptLeavesNothing: an attempt that does not reach a
// majority deletes its grants on the nodes that gave them.
func TestFailedAttemptLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cs := clients(t, nodes(t))
	p := prefix(t)
	l := locker(t, cs, &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	lock := "{" + p + "job}"
	t.Cleanup(func() {
		for _, c := range cs {
			c.Del(context.Background(), lock, lock+":fence")
		}
	})
	for _, c := range cs[:3] {
		require.NoError(t, c.Set(ctx, lock, "someone", time.Minute).Err())
	}
	_, err := l.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld)
	for i, c := range cs {
		v := c.Get(ctx, lock).Val()
		if i < 3 {
			require.Equal(t, "someone", v, "node %d", i)
		} else {
			require.Empty(t, v, "node %d: the failed attempt's grant was deleted", i)
		}
	}
}

// TestRenewAndReleaseNeedAMajority: a lease that lost its keys on a
// majority of nodes can neither be renewed nor released; one that lost
// them on a minority can.
func TestRenewAndReleaseNeedAMajority(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cs := clients(t, nodes(t))
	p := prefix(t)
	l := locker(t, cs, &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	lock := "{" + p + "job}"

	lease, err := l.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	for _, c := range cs[:2] {
		require.NoError(t, c.Del(ctx, lock).Err())
	}
	require.NoError(t, l.Renew(ctx, lease, time.Minute), "three of five still hold it")
	require.NoError(t, cs[2].Del(ctx, lock).Err())
	require.ErrorIs(t, l.Renew(ctx, lease, time.Minute), aegis.ErrLost, "two of five")
	require.ErrorIs(t, l.Release(ctx, lease), aegis.ErrLost)
	for i, c := range cs {
		require.Zero(t, c.Exists(ctx, lock).Val(), "node %d: the lost lease's leftovers were deleted", i)
	}
}

// TestDeadlineIsValidity: the lease's deadline is the start of the attempt
// plus the TTL minus the drift, never later.
func TestDeadlineIsValidity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := locker(t, clients(t, nodes(t)), &redlock.Config{Prefix: prefix(t), NodeTimeout: time.Second})
	before := time.Now()
	lease, err := l.TryAcquire(ctx, "job", 10*time.Second)
	after := time.Now()
	require.NoError(t, err)
	require.False(t, lease.Deadline.Before(aegis.LocalDeadline(before, 10*time.Second)))
	require.False(t, lease.Deadline.After(aegis.LocalDeadline(after, 10*time.Second)))
	require.NoError(t, l.Release(ctx, lease))
}

// TestUnreachableNodes: a minority of dead nodes costs nothing but their
// timeout; a majority is an error wrapping ErrNoQuorum that names them.
func TestUnreachableNodes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	live := nodes(t)
	dead := []string{"127.0.0.1:1", "127.0.0.1:2"}
	p := prefix(t)

	l := locker(t, clients(t, append(live[:3:3], dead...)), &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	lease, err := l.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err, "three of five answer")
	require.NoError(t, l.Renew(ctx, lease, time.Minute))
	require.NoError(t, l.Release(ctx, lease))

	l = locker(t, clients(t, append(live[:2:2], append(dead, "127.0.0.1:3")...)), &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	_, err = l.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNoQuorum)
	require.NotErrorIs(t, err, aegis.ErrHeld)
	require.ErrorContains(t, err, `redlock: acquire "job": 2 of 5 nodes agreed, 3 needed`)
	require.ErrorContains(t, err, "node 2: ")
	require.ErrorContains(t, err, "connection refused")
}

// TestSlowNode: a node that does not answer (paused) counts as failed after
// the node timeout (by default 5% of the TTL: 50ms here), whatever the
// client's own timeouts (go-redis: 3s); Close waits for the request left
// running.
func TestSlowNode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	slow, err := servers.StartRedis(ctx, filepath.Join(t.TempDir(), "slow"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = slow.Stop() })
	live := nodes(t)
	cs := clients(t, []string{live[0], live[1], slow.Addr()})
	l, err := redlock.New(cs, &redlock.Config{Prefix: prefix(t)})
	require.NoError(t, err)
	require.NoError(t, slow.Pause())
	start := time.Now()
	lease, err := l.TryAcquire(ctx, "job", time.Second)
	require.NoError(t, err, "two of three answer")
	require.Less(t, time.Since(start), 2*time.Second, "the attempt waited for the paused node beyond its timeout")
	require.NoError(t, l.Release(ctx, lease))

	// Two nodes, one paused: no quorum, and the error says the node did
	// not answer; it is not the caller's context running out.
	two, err := redlock.New(cs[1:], &redlock.Config{Prefix: prefix(t), NodeTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = two.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNoQuorum)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, `node 1: acquire "job": no answer within 50ms`)

	require.NoError(t, slow.Resume())
	require.NoError(t, l.Close())
	require.NoError(t, two.Close())
}

// TestForgedToken: the nodes compare only the owner; the lease's token is
// bound to it on the client, so a lease with another token is refused
// without touching the nodes.
func TestForgedToken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := locker(t, clients(t, nodes(t)), &redlock.Config{Prefix: prefix(t), NodeTimeout: time.Second})
	lease, err := l.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	for name, owner := range map[string]string{
		"higher token": strings.Replace(lease.Owner, fmt.Sprint(":", lease.Token), fmt.Sprint(":", lease.Token+1), 1),
		"no token":     strings.Split(lease.Owner, ":")[0],
		"empty id":     fmt.Sprint(":", lease.Token),
	} {
		forged := *lease
		forged.Owner = owner
		require.ErrorIs(t, l.Renew(ctx, &forged, time.Minute), aegis.ErrLost, name)
		require.ErrorIs(t, l.Release(ctx, &forged), aegis.ErrLost, name)
	}
	require.NoError(t, l.Release(ctx, lease))
}
