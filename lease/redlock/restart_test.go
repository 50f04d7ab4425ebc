package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/redlock"
)

// fiveNodes starts five private Redis servers (no persistence, as the
// shared ones), stopped with the test.
func fiveNodes(t *testing.T) ([]*servers.Redis, []string) {
	t.Helper()
	var (
		procs []*servers.Redis
		addrs []string
	)
	for i := range 5 {
		r, err := servers.StartRedis(context.Background(), filepath.Join(t.TempDir(), fmt.Sprint("node-", i)), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Stop() })
		procs = append(procs, r)
		addrs = append(addrs, r.Addr())
	}
	return procs, addrs
}

// restart stops the nodes, wipes their data and starts them again on the
// same ports: a crash of a node that does not fsync.
func restart(t *testing.T, nodes ...*servers.Redis) {
	t.Helper()
	for _, n := range nodes {
		require.NoError(t, n.Stop())
		require.NoError(t, n.Wipe())
		require.NoError(t, n.Start(context.Background()))
	}
}

// counters returns each node's counter of key ("" when it has none).
func counters(t *testing.T, cs []redis.UniversalClient, key string) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Get(t.Context(), "{aegis:"+key+"}:fence").Val()
	}
	return out
}

func grantAndRelease(t *testing.T, l *redlock.Locker, key string, times int) {
	t.Helper()
	for range times {
		lease, err := l.TryAcquire(t.Context(), key, time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(t.Context(), lease))
	}
}

// TestMajorityRestartTwoHolders: a majority of nodes restarted without
// their data while a lease is held grants the key to a second client, with
// a token lower than the first holder's.
func TestMajorityRestartTwoHolders(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	procs, addrs := fiveNodes(t)
	cfg := &redlock.Config{NodeTimeout: time.Second}
	a := locker(t, clients(t, addrs), cfg)
	grantAndRelease(t, a, "job", 3)
	held, err := a.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 4, held.Token)

	restart(t, procs[0], procs[1], procs[2])

	bc := clients(t, addrs)
	b := locker(t, bc, cfg)
	lb, err := b.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err, "the restarted majority forgot A's lease")
	require.True(t, time.Now().Before(held.Deadline), "A's lease is still valid on A's clock: two holders")
	require.EqualValues(t, 1, lb.Token, "the restarted counters start over")
	require.Less(t, lb.Token, held.Token)
	require.Equal(t, []string{"1", "1", "1", "4", "4"}, counters(t, bc, "job"), "two majorities, two counters")
	t.Logf("A holds token %d on nodes 3-4 (and believes it holds the key); B holds token %d on nodes 0-2", held.Token, lb.Token)

	// A can no longer renew or release: a majority holds B's owner.
	require.ErrorIs(t, a.Renew(ctx, held, time.Minute), aegis.ErrLost)
	require.ErrorIs(t, a.Release(ctx, held), aegis.ErrLost)

	// Once B is done, a grant on all five nodes raises the restarted
	// counters: the order resumes above both.
	require.NoError(t, b.Release(ctx, lb))
	lc, err := b.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 5, lc.Token)
	require.Equal(t, strings.Split("5 5 5 5 5", " "), counters(t, bc, "job"))
	require.NoError(t, b.Release(ctx, lc))
}

// TestMinorityRestartKeepsOrder: a minority restarted without its data
// neither frees the key nor sends the token back.
func TestMinorityRestartKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	procs, addrs := fiveNodes(t)
	cfg := &redlock.Config{NodeTimeout: time.Second}
	a := locker(t, clients(t, addrs), cfg)
	grantAndRelease(t, a, "job", 3)
	held, err := a.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)

	restart(t, procs[0], procs[1])

	bc := clients(t, addrs)
	b := locker(t, bc, cfg)
	_, err = b.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld, "three of five still hold A's lease")
	require.NoError(t, a.Renew(ctx, held, time.Minute))
	require.NoError(t, a.Release(ctx, held))

	lb, err := b.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.Greater(t, lb.Token, held.Token, "the restarted nodes' counters were raised to the token")
	require.Equal(t, strings.Split("5 5 5 5 5", " "), counters(t, bc, "job"))
	require.NoError(t, b.Release(ctx, lb))
}

// TestStaleHolderAfterExpiry: once a lease expired on the nodes and a
// successor holds the key, the first holder's renew and release change
// nothing.
func TestStaleHolderAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cs := clients(t, nodes(t))
	p := prefix(t)
	a := locker(t, clients(t, nodes(t)), &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	b := locker(t, cs, &redlock.Config{Prefix: p, NodeTimeout: time.Second})
	// A 100ms lease outlives a slow majority only on a quiet machine: a
	// grant whose validity ran out before the answers came is no grant
	// (and releases its keys), so it is asked again.
	la, err := a.TryAcquire(ctx, "job", 100*time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, redlock.ErrValidityExpired) && time.Now().Before(deadline); {
		la, err = a.TryAcquire(ctx, "job", 100*time.Millisecond)
	}
	require.NoError(t, err)
	var lb *aegis.Lease
	require.Eventually(t, func() bool {
		lb, err = b.TryAcquire(ctx, "job", time.Minute)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	require.Greater(t, lb.Token, la.Token)

	require.ErrorIs(t, a.Renew(ctx, la, time.Hour), aegis.ErrLost)
	require.ErrorIs(t, a.Release(ctx, la), aegis.ErrLost)
	// The successor won when a majority had expired A's keys: it holds at
	// least that majority, with its own TTL, and A holds nothing.
	bID, aID := strings.Split(lb.Owner, ":")[0], strings.Split(la.Owner, ":")[0]
	var holds int
	for i, c := range cs {
		switch c.Get(ctx, "{"+p+"job}").Val() {
		case bID:
			holds++
			require.Greater(t, c.PTTL(ctx, "{"+p+"job}").Val(), 50*time.Second, "node %d: the successor's TTL", i)
		case aID:
			t.Fatalf("node %d still holds the stale lease", i)
		}
	}
	require.GreaterOrEqual(t, holds, b.Quorum(), "the successor keeps its majority")
	_, err = a.TryAcquire(ctx, "job", time.Second)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, b.Release(ctx, lb))
}
