package redislease_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/redislease"
)

// The failure tests run on private servers: they pause, kill and promote.

// replicated starts a primary and a replica of it, and waits until the
// replica is in sync. The primary drops a replica that has not answered
// for a second (repl-timeout 1), as it would one stalled or cut off.
func replicated(t *testing.T) (primary, replica *servers.Redis) {
	t.Helper()
	primary = startRedis(t, &servers.RedisConfig{Config: map[string]string{"repl-timeout": "1"}})
	replica = startRedis(t, &servers.RedisConfig{ReplicaOf: primary.Addr()})
	require.Eventually(t, func() bool {
		info, err := servers.RedisCommand(context.Background(), replica.Addr(), "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 20*time.Second, 5*time.Millisecond, "the replica did not sync")
	return primary, replica
}

// connectedReplicas is the primary's count of replicas it streams to.
func connectedReplicas(t *testing.T, primary *servers.Redis) int {
	info, err := servers.RedisCommand(context.Background(), primary.Addr(), "INFO", "replication")
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no connected_slaves in INFO replication: %q", info)
	return 0
}

// promote makes the replica a primary, as Sentinel would after the
// primary's death.
func promote(t *testing.T, replica *servers.Redis) {
	t.Helper()
	reply, err := servers.RedisCommand(context.Background(), replica.Addr(), "REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	require.Equal(t, "OK", reply)
}

func counter(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	v, err := c.Get(t.Context(), "{aegis:"+key+"}:fence").Int64()
	require.NoError(t, err)
	return v
}

// TestFailoverLosesTheLease: grants made while the replica is cut off are
// lost when it is promoted. A second client is granted the key while the
// first still holds it, and the counter goes back: the new grant reuses a
// token the lost primary already handed out.
func TestFailoverLosesTheLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, replica := replicated(t)
	a := locker(t, client(t, primary.Addr()), nil)

	// Three grants that reach the replica.
	for range 3 {
		l, err := a.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx, l))
	}
	rc := client(t, replica.Addr())
	require.Eventually(t, func() bool { return rc.Get(ctx, "{aegis:job}:fence").Val() == "3" }, 10*time.Second, 5*time.Millisecond)

	// The replica stalls; the primary drops it after repl-timeout. (A
	// paused replica alone is not enough on one host: the primary's writes
	// wait in the replica's socket buffer and are applied on resume.)
	require.NoError(t, replica.Pause())
	require.Eventually(t, func() bool { return connectedReplicas(t, primary) == 0 }, 20*time.Second, 20*time.Millisecond,
		"the primary did not drop the stalled replica")

	// Grants 4, 5 and 6 reach only the primary; A holds 6 for a minute.
	var held *aegis.Lease
	for i := range 3 {
		l, err := a.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 4+i, l.Token)
		if i < 2 {
			require.NoError(t, a.Release(ctx, l))
		}
		held = l
	}

	// The primary dies; the replica is promoted.
	require.NoError(t, primary.Kill())
	require.NoError(t, replica.Resume())
	promote(t, replica)

	b := locker(t, rc, nil)
	lb, err := b.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err, "the promoted replica never saw A's grant")
	require.True(t, time.Now().Before(held.Deadline), "A's lease is still live on A's clock: two holders")
	require.EqualValues(t, 4, lb.Token, "the counter went back from 6 to 3: B gets token 4 again")
	require.Less(t, lb.Token, held.Token, "B's token is lower than the stale holder's")
	t.Logf("A holds token %d (granted by the lost primary); B holds token %d from the promoted replica", held.Token, lb.Token)
}

// TestFailoverWithWaitKeepsTheLease: with WaitReplicas 1 a grant is
// returned only once the replica acknowledged it, so the promoted replica
// has it: the second client gets ErrHeld, the holder can still release it
// there, and the next token is greater.
func TestFailoverWithWaitKeepsTheLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, replica := replicated(t)
	a := locker(t, client(t, primary.Addr()), &redislease.Config{WaitReplicas: 1, WaitTimeout: 10 * time.Second})
	for range 3 {
		l, err := a.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx, l))
	}
	held, err := a.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 4, held.Token)

	require.NoError(t, primary.Kill()) // at once: WAIT already confirmed the copy
	promote(t, replica)

	rc := client(t, replica.Addr())
	b := locker(t, rc, nil)
	_, err = b.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld, "the lease survived the failover")
	require.EqualValues(t, 4, counter(t, rc, "job"), "and so did the counter")

	// A, reconnected to the new primary, still holds its lease there.
	a2 := locker(t, rc, nil)
	require.NoError(t, a2.Renew(ctx, held, time.Minute))
	require.NoError(t, a2.Release(ctx, held))
	lb, err := b.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 5, lb.Token, "the token was not reused")
}

// TestWaitReplicasNotAcknowledged: when the replica does not acknowledge in
// time, the grant is released and the error says how many did.
func TestWaitReplicasNotAcknowledged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, replica := replicated(t)
	pc := client(t, primary.Addr())
	// Timeouts that the healthy replica meets even on a loaded machine.
	healthy := locker(t, pc, &redislease.Config{WaitReplicas: 1, WaitTimeout: 10 * time.Second})
	two := locker(t, pc, &redislease.Config{WaitReplicas: 2, WaitTimeout: time.Second})
	paused := locker(t, pc, &redislease.Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})

	l, err := healthy.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.NoError(t, healthy.Release(ctx, l))

	_, err = two.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redislease.ErrNotReplicated)
	require.ErrorContains(t, err, `redislease: acquire "job": WAIT: 1 of 2 replicas acknowledged within 1s, so the grant was released`)

	require.NoError(t, replica.Pause())
	_, err = paused.TryAcquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redislease.ErrNotReplicated)
	require.ErrorContains(t, err, "WAIT: 0 of 1 replicas acknowledged within 50ms")
	require.NoError(t, replica.Resume())

	// Nothing is left held: a client without WAIT takes the key at once,
	// with a token above the two released grants'.
	b := locker(t, pc, nil)
	lb, err := b.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 4, lb.Token)
}

// TestStaleHolderAfterExpiry: a holder whose lease expired (paused, say)
// finds its renew and release refused, and they change nothing in Redis:
// the successor keeps the key, its TTL and the counter.
func TestStaleHolderAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := startRedis(t, nil)
	raw := client(t, r.Addr())
	a := locker(t, client(t, r.Addr()), nil)
	b := locker(t, client(t, r.Addr()), nil)

	la, err := a.TryAcquire(ctx, "job", 100*time.Millisecond)
	require.NoError(t, err)
	var lb *aegis.Lease
	require.Eventually(t, func() bool {
		lb, err = b.TryAcquire(ctx, "job", time.Minute)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	require.Greater(t, lb.Token, la.Token)
	pttl := raw.PTTL(ctx, "{aegis:job}").Val()

	require.ErrorIs(t, a.Renew(ctx, la, time.Hour), aegis.ErrLost)
	require.ErrorIs(t, a.Release(ctx, la), aegis.ErrLost)

	require.Equal(t, lb.Owner, fmt.Sprint(raw.Get(ctx, "{aegis:job}").Val(), ":", lb.Token), "the successor still holds the key")
	require.LessOrEqual(t, raw.PTTL(ctx, "{aegis:job}").Val(), pttl, "the stale renew did not extend it")
	require.Equal(t, int64(lb.Token), counter(t, raw, "job"), "nor bump the counter")
	_, err = a.TryAcquire(ctx, "job", time.Second)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, b.Release(ctx, lb), "the successor's release works")
}

// TestScriptCacheFlushed: after the server loses its script cache (a
// restart, a failover to a replica that never ran EVAL), each script runs
// once by EVAL, which caches it again, then by SHA.
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := startRedis(t, nil)
	raw := client(t, r.Addr())
	l := locker(t, client(t, r.Addr()), nil)
	lease, err := l.TryAcquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.NoError(t, raw.ScriptFlush(ctx).Err())
	require.NoError(t, raw.ConfigResetStat(ctx).Err())

	require.NoError(t, l.Renew(ctx, lease, time.Minute))
	require.NoError(t, l.Release(ctx, lease))
	for range 3 {
		lease, err = l.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx, lease))
	}
	stats := raw.Info(ctx, "commandstats").Val()
	// Eight script calls: the first of each script by SHA is refused
	// (NOSCRIPT) and sent again by EVAL; the other five run by SHA.
	require.Contains(t, stats, "cmdstat_eval:calls=3,", "one EVAL per script (renew, release, acquire)")
	require.Regexp(t, `cmdstat_evalsha:calls=8,.*failed_calls=3\r`, stats)
}
