package etcdlease_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// leaseOf is the etcd lease a session-mode grant's owner names.
func leaseOf(t *testing.T, lease *aegis.Lease) clientv3.LeaseID {
	t.Helper()
	hexID, _, ok := strings.Cut(lease.Owner, ".")
	require.True(t, ok)
	id, err := strconv.ParseUint(hexID, 16, 64)
	require.NoError(t, err)
	return clientv3.LeaseID(id)
}

// TestSessionSharesOneLease: the grants of one Locker in session mode put
// their keys on one etcd lease of SessionTTL, and a TTL below a second,
// which the Locker's timer enforces, frees the key for another Locker.
func TestSessionSharesOneLease(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	c := client(t, testenv.EtcdEndpoints(t))
	a := sessionLocker(t, nil)
	b := sessionLocker(t, nil)
	k1, k2 := testenv.Key(t)+"/1", testenv.Key(t)+"/2"
	l1, err := a.TryAcquire(ctx, k1, 10*time.Second)
	require.NoError(t, err)
	l2, err := a.TryAcquire(ctx, k2, 300*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, leaseOf(t, l1), leaseOf(t, l2), "one etcd lease for both grants")
	for _, key := range []string{k1, k2} {
		resp, err := c.Get(ctx, "aegis/lease/"+strings.ReplaceAll(key, "/", "%2F")+"/", clientv3.WithPrefix())
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, key)
		require.Equal(t, leaseOf(t, l1), clientv3.LeaseID(resp.Kvs[0].Lease), "the key is on the session's etcd lease")
	}
	ttl, err := c.TimeToLive(ctx, leaseOf(t, l1))
	require.NoError(t, err)
	require.EqualValues(t, 60, ttl.GrantedTTL, "the default SessionTTL")

	var next *aegis.Lease
	require.Eventually(t, func() bool {
		next, err = b.TryAcquire(ctx, k2, time.Second)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the 300 ms grant expires by the Locker's timer")
	require.Greater(t, next.Token, l2.Token)
	require.ErrorIs(t, a.Renew(ctx, l2, time.Second), aegis.ErrLost)
	require.NoError(t, a.Renew(ctx, l1, 10*time.Second), "the other grant is intact")
	require.NoError(t, a.Release(ctx, l1))
	require.NoError(t, b.Release(ctx, next))
}

// TestSessionLost: when the session's etcd lease goes (expired during a
// pause past SessionTTL; revoked here), every grant on it is ErrLost and
// the next grant starts a new session.
func TestSessionLost(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	c := client(t, testenv.EtcdEndpoints(t))
	a := sessionLocker(t, nil)
	key := testenv.Key(t)
	old, err := a.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	_, err = c.Revoke(ctx, leaseOf(t, old))
	require.NoError(t, err)
	err = a.Renew(ctx, old, 10*time.Second)
	require.ErrorIs(t, err, aegis.ErrLost)
	require.ErrorContains(t, err, "key deleted or taken")
	require.ErrorIs(t, a.Release(ctx, old), aegis.ErrLost)
	fresh, err := a.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err, "a new session")
	require.NotEqual(t, leaseOf(t, old), leaseOf(t, fresh))
	require.Greater(t, fresh.Token, old.Token)
	require.NoError(t, a.Renew(ctx, fresh, 10*time.Second))
	require.NoError(t, a.Release(ctx, fresh))
}

// TestSessionClose: Close revokes the session, which frees every key it
// held at once; the Locker refuses calls afterwards.
func TestSessionClose(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	a, b := sessionLocker(t, nil), sessionLocker(t, nil)
	key := testenv.Key(t)
	held, err := a.TryAcquire(ctx, key, 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	next, err := b.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err, "the key is free at once")
	require.Greater(t, next.Token, held.Token)
	_, err = a.TryAcquire(ctx, testenv.Key(t), time.Second)
	require.ErrorContains(t, err, "locker closed")
	require.ErrorIs(t, a.Renew(ctx, held, time.Second), aegis.ErrLost)
	require.NoError(t, b.Release(ctx, next))
}

// TestSessionReusesItsKey: a Locker in session mode that locks one key
// again and again puts one etcd key (a new one per grant would pile up
// deleted keys in etcd's index until compaction), and a second grant of the
// same Locker on that lock, waiting in Acquire, has a key of its own.
func TestSessionReusesItsKey(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	c := client(t, testenv.EtcdEndpoints(t))
	a := sessionLocker(t, nil)
	key := testenv.Key(t)
	keys := func() []string {
		t.Helper()
		resp, err := c.Get(ctx, "aegis/lease/"+key+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		require.NoError(t, err)
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, string(kv.Key))
		}
		return out
	}
	var first []string
	var last aegis.Token
	for i := range 3 {
		lease, err := a.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		require.Greater(t, lease.Token, last)
		last = lease.Token
		got := keys()
		require.Len(t, got, 1)
		if i == 0 {
			first = got
		}
		require.Equal(t, first, got, "grant %d reuses the key", i)
		if i < 2 {
			require.NoError(t, a.Release(ctx, lease))
			continue
		}
		type result struct {
			lease *aegis.Lease
			err   error
		}
		waited := make(chan result, 1)
		go func() {
			l, err := a.Acquire(ctx, key, 10*time.Second)
			waited <- result{l, err}
		}()
		require.Eventually(t, func() bool { return len(keys()) == 2 }, 10*time.Second, 5*time.Millisecond, "the waiter queues under a key of its own")
		require.NoError(t, a.Release(ctx, lease))
		select {
		case r := <-waited:
			require.NoError(t, r.err)
			require.Greater(t, r.lease.Token, lease.Token)
			require.NotEqual(t, first, keys(), "the waiter's key is another slot")
			require.NoError(t, a.Release(ctx, r.lease))
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not granted the key within 10 s of the release")
		}
	}
	lease, err := a.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, first, keys(), "the first slot is free again")
	require.NoError(t, a.Release(ctx, lease))
}
