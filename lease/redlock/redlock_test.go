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
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/testing/losstest"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
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
		TTL: time.Second, // long enough that a loaded machine does not expire a renewing holder
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	newClient := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr}) // never dialled
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b, c := newClient("127.0.0.1:1"), newClient("127.0.0.1:2"), newClient("127.0.0.1:3")
	sameAddr := newClient("127.0.0.1:2")
	var typedNil *redis.Client
	tests := []struct {
		name  string
		nodes []redis.UniversalClient
		cfg   *redlock.Config
		want  string
	}{
		{"no nodes", nil, nil, "redlock: aegis: invalid argument: no nodes"},
		{"nil node", []redis.UniversalClient{a, nil, c}, nil, "redlock: aegis: invalid argument: node 1 is nil"},
		{"typed nil node", []redis.UniversalClient{a, b, typedNil}, nil, "redlock: aegis: invalid argument: node 2 is a nil *redis.Client"},
		{"one node", []redis.UniversalClient{a}, nil, "redlock: aegis: invalid argument: 1 nodes; Redlock needs at least 3 independent primaries"},
		{"two nodes", []redis.UniversalClient{a, b}, nil, "2 nodes; Redlock needs at least 3"},
		{"the same client three times", []redis.UniversalClient{a, a, a}, nil, "redlock: aegis: invalid argument: nodes 0 and 1 are the same client: one Redis would count twice toward the quorum"},
		{"the same client twice", []redis.UniversalClient{a, b, c, b}, nil, "nodes 1 and 3 are the same client"},
		{"two clients of one address", []redis.UniversalClient{a, b, sameAddr}, nil, "redlock: aegis: invalid argument: nodes 1 and 2 both dial tcp 127.0.0.1:2: one Redis would count twice toward the quorum"},
		{"brace", []redis.UniversalClient{a, b, c}, &redlock.Config{Prefix: "{"}, `redlock: aegis: invalid argument: Config.Prefix "{" holds '{', '}' or NUL`},
		{"negative timeout", []redis.UniversalClient{a, b, c}, &redlock.Config{NodeTimeout: -time.Second}, "redlock: aegis: invalid argument: Config.NodeTimeout -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redlock.New(tt.nodes, tt.cfg)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, tt.want)
		})
	}
	for n, quorum := range map[int]int{3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		cs := make([]redis.UniversalClient, n)
		for i := range cs {
			cs[i] = newClient(fmt.Sprint("127.0.0.1:", i+1))
		}
		l, err := redlock.New(cs, &redlock.Config{SkipPolicyCheck: true})
		require.NoError(t, err)
		require.Equal(t, quorum, l.Quorum(), "%d nodes", n)
	}
	// Nodes that do not answer are not checked: New still succeeds, within
	// its bound.
	start := time.Now()
	_, err := redlock.New([]redis.UniversalClient{a, b, c}, nil)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestEvictionPolicy: a node whose maxmemory-policy can evict the token
// counters is refused, as in redislease.
func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r, err := servers.StartRedis(ctx, filepath.Join(t.TempDir(), "lru"), &servers.RedisConfig{Config: map[string]string{"maxmemory-policy": "allkeys-lru"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	live := nodes(t)
	cs := clients(t, []string{live[0], live[1], r.Addr()})
	_, err = redlock.New(cs, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "redlock: aegis: invalid argument: node 2: Redis "+r.Addr()+" has maxmemory-policy allkeys-lru, which can evict the token counters")
	locker(t, cs, &redlock.Config{SkipPolicyCheck: true})
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
	require.NoError(t, cs[2].Set(ctx, lock, "someone", time.Minute).Err())
	err = l.Renew(ctx, lease, time.Minute)
	require.ErrorIs(t, err, aegis.ErrLost, "two of five")
	for i := range 2 {
		require.ErrorContains(t, err, fmt.Sprintf("node %d (%s): the key is gone", i, nodes(t)[i]))
	}
	require.ErrorContains(t, err, fmt.Sprintf("node 2 (%s): another owner holds the key", nodes(t)[2]))
	require.ErrorContains(t, err, `redlock: renew "job": aegis: lease lost: 2 of 5 nodes hold the lease, 3 needed (`)
	require.NotContains(t, err.Error(), strings.Split(lease.Owner, ":")[0], "never the owner value")
	err = l.Release(ctx, lease)
	require.ErrorIs(t, err, aegis.ErrLost)
	require.ErrorContains(t, err, `redlock: release "job": aegis: lease lost: 2 of 5 nodes hold the lease, 3 needed (`)
	require.NoError(t, cs[2].Del(ctx, lock).Err())
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
	require.False(t, lease.Deadline.Before(driver.LocalDeadline(before, 10*time.Second)))
	require.False(t, lease.Deadline.After(driver.LocalDeadline(after, 10*time.Second)))
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
	require.ErrorContains(t, err, "node 2 (127.0.0.1:1): ")
	require.ErrorContains(t, err, "connection refused")

	// Clients with go-redis's defaults retry a refused dial until the node
	// timeout ends: the error still names the node and says why.
	var defaults []redis.UniversalClient
	for _, a := range []string{live[0], "127.0.0.1:1", "127.0.0.1:2"} {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		defaults = append(defaults, c)
	}
	l = locker(t, defaults, &redlock.Config{Prefix: p, NodeTimeout: 50 * time.Millisecond})
	_, err = l.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNoQuorum)
	require.ErrorContains(t, err, `node 1 (127.0.0.1:1): acquire "job": no answer within 50ms: connection refused`)
	require.ErrorContains(t, err, `node 2 (127.0.0.1:2): acquire "job": no answer within 50ms: connection refused`)
}

// TestValidityExpired: when every node answers but the majority's answers
// come after the lease's validity, the error says the validity ran out,
// not that no quorum answered, and nothing is left held.
func TestValidityExpired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var addrs []string
	for i := range 2 {
		r, err := servers.StartRedis(ctx, filepath.Join(t.TempDir(), fmt.Sprint("slow-", i)), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Stop() })
		addrs = append(addrs, r.Addr())
	}
	addrs = append(addrs, nodes(t)[0])
	cs := clients(t, addrs)
	p := prefix(t)
	l := locker(t, cs, &redlock.Config{Prefix: p, NodeTimeout: 10 * time.Second})
	// The two private nodes hold writes (scripts included) for 500ms: they
	// answer, but after the 100ms lease's validity.
	for _, c := range cs[:2] {
		require.NoError(t, c.Do(ctx, "CLIENT", "PAUSE", "500", "WRITE").Err())
	}
	_, err := l.TryAcquire(ctx, "job", 100*time.Millisecond)
	require.ErrorIs(t, err, redlock.ErrValidityExpired)
	require.NotErrorIs(t, err, redlock.ErrNoQuorum)
	require.NotContains(t, err.Error(), "no quorum")
	require.Regexp(t, `^redlock: acquire "job": redlock: the lease's validity ran out before a majority answered: a majority answered after \S+, and a 100ms lease is valid for 97ms \(the TTL less 3ms of drift\)$`, err.Error())
	for i, c := range cs {
		require.Zero(t, c.Exists(ctx, "{"+p+"job}").Val(), "node %d: the late grant was deleted", i)
	}
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

	// One node of three live, one paused, one refusing: no quorum, and the
	// error says the paused node did not answer (it accepts connections);
	// it is not the caller's context running out.
	two, err := redlock.New(append(cs[1:], clients(t, []string{"127.0.0.1:1"})...), &redlock.Config{Prefix: prefix(t), NodeTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = two.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNoQuorum)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, fmt.Sprintf("node 1 (%s): acquire \"job\": no answer within 50ms\n", slow.Addr()))

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

// TestNotify: a release wakes a waiter subscribed on the nodes, also when a
// minority of them refuses connections; NoWakeups subscribes to nothing.
func TestNotify(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	live := nodes(t)
	p := prefix(t)
	cs := clients(t, []string{live[0], live[1], "127.0.0.1:1"})
	waiter := locker(t, cs, &redlock.Config{Prefix: p, NodeTimeout: 100 * time.Millisecond, SkipPolicyCheck: true})
	holder := locker(t, clients(t, []string{live[0], live[1], "127.0.0.1:1"}), &redlock.Config{Prefix: p, NodeTimeout: 100 * time.Millisecond, SkipPolicyCheck: true})

	lease, err := holder.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err, "two of three nodes answer")
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wake, stop, err := waiter.Notify(nctx, "job")
	require.NoError(t, err, "a quorum of nodes subscribed; the refusing one costs no wake-up")
	defer stop()
	require.NoError(t, holder.Release(ctx, lease))
	testenv.Recv(t, wake, 10*time.Second, "the wake-up of the release")
	stop()
	stop() // idempotent

	quiet := locker(t, clients(t, live[:3]), &redlock.Config{Prefix: p, NoWakeups: true})
	ch, stopQuiet, err := quiet.Notify(ctx, "job")
	require.NoError(t, err)
	require.Nil(t, ch, "NoWakeups: a channel that never fires")
	stopQuiet()

	_, _, err = waiter.Notify(ctx, "")
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// TestConcurrentCallsKeepExclusion: the calls of goroutines sharing one
// Locker go to each node coalesced into pipelines; through them, one key
// still has one holder at a time, its tokens increase, and every call on
// keys of their own succeeds.
func TestConcurrentCallsKeepExclusion(t *testing.T) {
	t.Parallel()
	l := locker(t, clients(t, nodes(t)), &redlock.Config{Prefix: prefix(t), NodeTimeout: time.Second})
	losstest.Contend(t, l, 16, 10, 2*time.Minute)
}
