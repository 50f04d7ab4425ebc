package node

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/redislease"
)

// The Lockers of broken.go do harm on purpose; these tests show the harm
// on real servers, each beside the correct Locker refusing it.

// shortTTL is the lease that is let expire; longTTL one that must not
// expire during the test, even on a loaded machine.
const (
	shortTTL = 300 * time.Millisecond
	longTTL  = 30 * time.Second
)

// acquireWhenFree polls TryAcquire until the key's lease, held by someone
// else, has expired and l grants it; ErrHeld until then.
func acquireWhenFree(t *testing.T, l aegis.Locker, key string) *aegis.Lease {
	t.Helper()
	var got *aegis.Lease
	require.Eventually(t, func() bool {
		lease, err := l.TryAcquire(t.Context(), key, longTTL)
		if err != nil && !errors.Is(err, aegis.ErrHeld) {
			t.Errorf("TryAcquire %q: %v", key, err)
			return true
		}
		got = lease
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the %s lease of %q never expired", shortTTL, key)
	require.NotNil(t, got, "TryAcquire %q", key)
	return got
}

// A expires, B is granted, A releases: redisDel's DEL deletes B's key and
// C is granted while B still holds it. redislease's Release, in the same
// sequence, is ErrLost and changes nothing, and C is refused.
func TestRedisDelReleasesAnotherHoldersKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := testenv.RedisAddrs(t)[0]
	key := testenv.Key(t)

	t.Run("redisDel", func(t *testing.T) {
		l, closeFn, err := openRedisDel(ctx, &node{})
		require.NoError(t, err)
		t.Cleanup(closeFn)
		raw := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() {
			// The token counter never expires: remove it.
			require.NoError(t, raw.Del(context.Background(), redisPrefixDel+key, redisPrefixDel+key+":fence").Err())
			require.NoError(t, raw.Close())
		})

		a, err := l.TryAcquire(ctx, key, shortTTL)
		require.NoError(t, err)
		b := acquireWhenFree(t, l, key)
		require.Greater(t, b.Token, a.Token, "the grant's tokens grow")

		require.NoError(t, l.Release(ctx, a), "the expired holder's DEL succeeds")
		n, err := raw.Exists(ctx, redisPrefixDel+key).Result()
		require.NoError(t, err)
		require.Zero(t, n, "A's DEL deleted B's key")

		c, err := l.TryAcquire(ctx, key, longTTL)
		require.NoError(t, err, "the harm: C is granted while B holds the key")
		require.Greater(t, c.Token, b.Token)
		require.NoError(t, l.Renew(ctx, b, longTTL), "and B's PEXPIRE, on C's key, tells B it still holds")
	})

	t.Run("redislease", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		l, err := redislease.New(c, &redislease.Config{Prefix: "aegis-test:" + key + ":"})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })

		a, err := l.TryAcquire(ctx, key, shortTTL)
		require.NoError(t, err)
		b := acquireWhenFree(t, l, key)

		require.ErrorIs(t, l.Release(ctx, a), aegis.ErrLost, "compare-and-delete refuses the expired holder")
		_, err = l.TryAcquire(ctx, key, longTTL)
		require.ErrorIs(t, err, aegis.ErrHeld, "C is refused: B still holds the key")
		require.NoError(t, l.Release(ctx, b))
	})
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// With Redis unreachable, two failOpen Lockers (two nodes) both hold the
// key; redislease on the same address fails closed. Not parallel: it sets
// the node's AEGIS_REDIS_ADDRS, as the lab does.
func TestFailOpenGrantsWhenRedisIsDown(t *testing.T) {
	addr := closedAddr(t)
	t.Setenv(servers.EnvRedisAddrs, addr)
	ctx := t.Context()
	key := testenv.Key(t)

	var leases []*aegis.Lease
	for range 2 {
		l, closeFn, err := openFailOpen(ctx, &node{})
		require.NoError(t, err, "fail open does not need Redis to start")
		t.Cleanup(closeFn)
		lease, err := l.TryAcquire(ctx, key, longTTL)
		require.NoError(t, err, "fail open: granted without Redis")
		require.NoError(t, l.Renew(ctx, lease, longTTL))
		t.Cleanup(func() { require.NoError(t, l.Release(context.Background(), lease)) })
		leases = append(leases, lease)
	}
	require.NotEqual(t, leases[0].Owner, leases[1].Owner, "two holders of one key")
	require.Equal(t, leases[0].Token, leases[1].Token, "each process counts its tokens from 1")

	c := redis.NewClient(failOpenOptions(addr))
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	l, err := redislease.New(c, &redislease.Config{SkipPolicyCheck: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	lease, err := l.TryAcquire(ctx, key, longTTL)
	require.Error(t, err, "fail closed: no grant without Redis")
	require.NotErrorIs(t, err, aegis.ErrHeld)
	require.True(t, unreachable(err), "failOpen would have granted on this error: %v", err)
	require.Nil(t, lease)
}

// While Redis answers, failOpen is redislease: the second node is
// refused, and a bad key is an error, not a grant.
func TestFailOpenHoldsWhileRedisAnswers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := testenv.RedisAddrs(t)[0]
	key := testenv.Key(t)
	var ls [2]*failOpen
	for i := range ls {
		c := redis.NewClient(failOpenOptions(addr))
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		l, err := newFailOpen(c, &redislease.Config{Prefix: "aegis-test:" + key + ":"})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		ls[i] = l
	}
	a, err := ls[0].TryAcquire(ctx, key, longTTL)
	require.NoError(t, err)
	_, err = ls[1].TryAcquire(ctx, key, longTTL)
	require.ErrorIs(t, err, aegis.ErrHeld)
	_, err = ls[1].TryAcquire(ctx, "", longTTL)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.NoError(t, ls[0].Release(ctx, a))
	b, err := ls[1].TryAcquire(ctx, key, longTTL)
	require.NoError(t, err)
	require.Greater(t, b.Token, a.Token)
	require.NoError(t, ls[1].Release(ctx, b))
}

// A's lease expires and B takes the row over with A's token: two owners of
// token 1. A bare fence (CheckSQL) accepts both holders' writes; the
// owner-aware one (CheckLeaseSQL) refuses the second.
func TestNoBumpKeepsTheTokenOnTakeover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.PostgresURL(t)
	l, closeFn, err := openNoBump(ctx, &node{c: lab.NodeConfig{Store: url}})
	require.NoError(t, err)
	t.Cleanup(closeFn)
	key := testenv.Key(t)

	a, err := l.TryAcquire(ctx, key, shortTTL)
	require.NoError(t, err)
	require.Equal(t, aegis.Token(1), a.Token)
	b := acquireWhenFree(t, l, key)
	require.NotEqual(t, a.Owner, b.Owner)
	require.Equal(t, a.Token, b.Token, "the harm: the takeover kept the expired holder's token")
	require.ErrorIs(t, l.Renew(ctx, a, longTTL), aegis.ErrLost, "renew compares the owner")
	require.ErrorIs(t, l.Release(ctx, a), aegis.ErrLost, "release compares the owner")

	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, fence.MigrateSQL(ctx, db))
	write := func(check func(*sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		if err := check(tx); err != nil {
			require.NoError(t, tx.Rollback())
			return err
		}
		return tx.Commit()
	}
	// B writes first; A, resuming, writes late with the same token.
	for _, h := range []*aegis.Lease{b, a} {
		require.NoError(t, write(func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "bare/"+key, h.Token) }),
			"the harm: a bare token fence accepts both holders of token %d", h.Token)
	}
	require.NoError(t, write(func(tx *sql.Tx) error { return fence.CheckLeaseSQL(ctx, tx, "owned/"+key, *b) }))
	err = write(func(tx *sql.Tx) error { return fence.CheckLeaseSQL(ctx, tx, "owned/"+key, *a) })
	require.ErrorIs(t, err, aegis.ErrStale, "the owner-aware fence refuses the second owner of token %d", a.Token)

	// Release keeps the row, and the next grant's token is greater: only
	// the takeover of an expired lease forgets to bump it.
	require.NoError(t, l.Release(ctx, b))
	c, err := l.TryAcquire(ctx, key, longTTL)
	require.NoError(t, err)
	require.Equal(t, b.Token+1, c.Token)
	require.NoError(t, l.Release(ctx, c))
}

func TestNoBumpNeedsPostgres(t *testing.T) {
	t.Parallel()
	_, _, err := openNoBump(t.Context(), &node{c: lab.NodeConfig{Store: "sqlite:" + t.TempDir() + "/x.db"}})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "PostgreSQL")
}

// A strategy's Backend names one of the lab's own Lockers exactly when it
// has the lab's prefix, and every lab Locker is a strategy's.
func TestLabLockersAreTheLabBackends(t *testing.T) {
	named := map[string]bool{}
	for _, s := range lab.Strategies {
		if _, ok := labLockers[s.Backend]; ok != s.LabLocked() {
			t.Errorf("strategy %s: Backend %q is a lab Locker: %t; labLocked says %t", s.Name, s.Backend, ok, s.LabLocked())
		}
		named[s.Backend] = true
	}
	for b := range labLockers {
		if !named[b] {
			t.Errorf("lab Locker %q is no strategy's Backend", b)
		}
	}
}
