package redislease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/redislease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is a client of its own on addr, closed with the test.
func client(t testing.TB, addr string) *redis.Client {
	return clientWith(t, &redis.Options{Addr: addr})
}

func clientWith(t testing.TB, opt *redis.Options) *redis.Client {
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// locker is a Locker on c, closed with the test.
func locker(t testing.TB, c redis.UniversalClient, cfg *redislease.Config) *redislease.Locker {
	l, err := redislease.New(c, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// prefix is a key prefix no other test uses.
func prefix(t testing.TB) string { return "aegis-test:" + testenv.Key(t) + ":" }

// startRedis starts a private Redis server, stopped with the test.
func startRedis(t testing.TB, cfg *servers.RedisConfig) *servers.Redis {
	t.Helper()
	r, err := servers.StartRedis(context.Background(), filepath.Join(t.TempDir(), "redis"), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddrs(t)[0]
	p := prefix(t)
	locktest.Run(t, locktest.Config{
		// A client per instance, as separate processes would have.
		New: func(t *testing.T) aegis.Locker {
			return locker(t, client(t, addr), &redislease.Config{Prefix: p})
		},
		TTL: time.Second, // long enough that a loaded machine (a second suite beside this one) does not expire a renewing holder
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	tests := []struct {
		name   string
		client redis.UniversalClient
		cfg    *redislease.Config
		want   string
	}{
		{"nil client", nil, nil, "redislease: aegis: invalid argument: client is nil"},
		{"typed nil client", (*redis.Client)(nil), nil, "redislease: aegis: invalid argument: client is a nil *redis.Client"},
		{"open brace", c, &redislease.Config{Prefix: "a{b"}, `Config.Prefix "a{b" holds '{', '}' or NUL`},
		{"close brace", c, &redislease.Config{Prefix: "}"}, `Config.Prefix "}" holds '{', '}' or NUL`},
		{"NUL", c, &redislease.Config{Prefix: "a\x00"}, "holds '{', '}' or NUL"},
		{"long prefix", c, &redislease.Config{Prefix: strings.Repeat("p", 65)}, "Config.Prefix is 65 bytes, at most 64"},
		{"negative replicas", c, &redislease.Config{WaitReplicas: -1}, "Config.WaitReplicas -1 is negative"},
		{"negative timeout", c, &redislease.Config{WaitReplicas: 1, WaitTimeout: -time.Second}, "Config.WaitTimeout -1s is negative"},
		{"WAIT on a ring", ring, &redislease.Config{WaitReplicas: 1}, "Config.WaitReplicas needs a *redis.Client or *redis.ClusterClient"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redislease.New(tt.client, tt.cfg)
			require.ErrorContains(t, err, tt.want)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.True(t, strings.HasPrefix(err.Error(), "redislease: "), err.Error())
		})
	}
	// A server that does not answer is not checked (nil: New's bounded
	// CONFIG GET runs and fails); the others skip the check.
	for _, cfg := range []*redislease.Config{nil, {SkipPolicyCheck: true}, {Prefix: "x", SkipPolicyCheck: true}, {WaitReplicas: 2, WaitTimeout: time.Second, SkipPolicyCheck: true}} {
		l, err := redislease.New(c, cfg)
		require.NoError(t, err, "%+v", cfg)
		require.NoError(t, l.Close())
	}
}

// TestLayout checks what a grant leaves in Redis: the lock holds the owner
// with the TTL, the counter holds the token and never expires, and both
// stay in one hash slot.
func TestLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := client(t, testenv.RedisAddrs(t)[0])
	p := prefix(t)
	l := locker(t, raw, &redislease.Config{Prefix: p})
	key := "jobs/{odd}key}"
	lock, fence := "{"+p+key+"}", "{"+p+key+"}:fence"

	lease, err := l.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	value := raw.Get(ctx, lock).Val()
	require.Len(t, value, 32, "a 128-bit owner value, hex")
	require.Equal(t, fmt.Sprint(value, ":", lease.Token), lease.Owner, "the lease's owner is the value and the token")
	require.Equal(t, fmt.Sprint(lease.Token), raw.Get(ctx, fence).Val())
	pttl := raw.PTTL(ctx, lock).Val()
	require.Greater(t, pttl, 9*time.Second)
	require.LessOrEqual(t, pttl, 10*time.Second)
	require.Equal(t, time.Duration(-1), raw.PTTL(ctx, fence).Val(), "the counter never expires")

	require.NoError(t, l.Renew(ctx, lease, 20*time.Second))
	require.Greater(t, raw.PTTL(ctx, lock).Val(), 19*time.Second)
	require.NoError(t, l.Release(ctx, lease))
	require.Zero(t, raw.Exists(ctx, lock).Val(), "released: the lock is gone")
	require.Equal(t, fmt.Sprint(lease.Token), raw.Get(ctx, fence).Val(), "the counter stays")

	// A TTL in a fraction of a millisecond is rounded up.
	short, err := l.TryAcquire(ctx, key, 2500*time.Microsecond)
	require.NoError(t, err)
	require.Greater(t, short.Token, lease.Token)
}

// TestCluster runs the conformance suite through a ClusterClient on a
// one-node Redis Cluster that serves every slot: the scripts' keys share a
// slot, and the wake-ups' pub/sub works there too.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	node := startRedis(t, &servers.RedisConfig{Config: map[string]string{"cluster-enabled": "yes"}})
	admin := client(t, node.Addr())
	require.NoError(t, admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
	require.Eventually(t, func() bool {
		return strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:ok")
	}, 20*time.Second, 10*time.Millisecond)

	for _, key := range []string{"k", "jobs/{odd}key}", "}", "{"} {
		n := "{aegis:" + key + "}"
		slot := admin.ClusterKeySlot(ctx, n).Val()
		require.Equal(t, slot, admin.ClusterKeySlot(ctx, n+":fence").Val(), key)
		require.NotEqual(t, admin.ClusterKeySlot(ctx, "aegis:"+key+":other").Val(), slot, "a hash tag is in use for %q", key)
	}
	t.Run("locktest", func(t *testing.T) {
		locktest.Run(t, locktest.Config{
			New: func(t *testing.T) aegis.Locker {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{node.Addr()}})
				t.Cleanup(func() { _ = c.Close() })
				return locker(t, c, &redislease.Config{WaitReplicas: 0})
			},
			TTL: time.Second, // long enough that a loaded machine (a second suite beside this one) does not expire a renewing holder
		})
	})
}

// TestForeignKeys: a lock key written by someone else (no TTL) is held, and
// a counter that is not a number is an error, not a grant.
func TestForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := client(t, testenv.RedisAddrs(t)[0])
	p := prefix(t)
	l := locker(t, raw, &redislease.Config{Prefix: p})
	require.NoError(t, raw.Set(ctx, "{"+p+"a}", "someone", 0).Err())
	t.Cleanup(func() { raw.Del(context.Background(), "{"+p+"a}", "{"+p+"b}:fence") })
	_, err := l.TryAcquire(ctx, "a", time.Second)
	require.ErrorIs(t, err, aegis.ErrHeld)

	require.NoError(t, raw.Set(ctx, "{"+p+"b}:fence", "not a number", 0).Err())
	_, err = l.TryAcquire(ctx, "b", time.Second)
	require.Error(t, err)
	require.NotErrorIs(t, err, aegis.ErrHeld)
	require.ErrorContains(t, err, `redislease: acquire "b": `)
}

// TestNotifyWakesOnRelease: a release through another Locker (another
// client, as another process) wakes a waiter at once.
func TestNotifyWakesOnRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := testenv.RedisAddrs(t)[0]
	p := prefix(t)
	a := locker(t, client(t, addr), &redislease.Config{Prefix: p})
	b := locker(t, client(t, addr), &redislease.Config{Prefix: p})
	la, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)

	wake, stop, err := b.Notify(ctx, "k")
	require.NoError(t, err)
	defer stop()
	select {
	case <-wake:
		t.Fatal("woken while the key is held")
	default:
	}
	require.NoError(t, a.Release(ctx, la))
	select {
	case _, ok := <-wake:
		require.True(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the waiter (its TTL was a minute)")
	}
	lb, err := b.TryAcquire(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, lb))

	_, _, err = b.Notify(ctx, "")
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// TestNotifyWakesOnExpiry: a lease that expires publishes nothing, but a
// waiter whose attempt found it held is woken just after its TTL.
func TestNotifyWakesOnExpiry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := testenv.RedisAddrs(t)[0]
	p := prefix(t)
	a := locker(t, client(t, addr), &redislease.Config{Prefix: p})
	b := locker(t, client(t, addr), &redislease.Config{Prefix: p})
	la, err := a.TryAcquire(ctx, "k", 300*time.Millisecond)
	require.NoError(t, err)

	wake, stop, err := b.Notify(ctx, "k")
	require.NoError(t, err)
	defer stop()
	_, err = b.TryAcquire(ctx, "k", time.Second)
	require.ErrorIs(t, err, aegis.ErrHeld, "the attempt learns the holder's TTL")
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken when the holder's lease expired")
	}
	lb, err := b.TryAcquire(ctx, "k", time.Second)
	require.NoError(t, err, "woken after the expiry: the key is free")
	require.Greater(t, lb.Token, la.Token)
	require.NoError(t, b.Release(ctx, lb))
}

// TestOnePubSubConnection: every waiter of a Locker, on every key, shares
// one pub/sub connection and one subscription per key.
func TestOnePubSubConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := testenv.RedisAddrs(t)[0]
	p := prefix(t)
	name := "aegis-test-" + randomHex(6)
	raw := client(t, addr)
	holder := locker(t, client(t, addr), &redislease.Config{Prefix: p})
	waiters := locker(t, clientWith(t, &redis.Options{Addr: addr, ClientName: name}), &redislease.Config{Prefix: p})

	const keys, perKey = 8, 3
	held := make([]*aegis.Lease, keys)
	for i := range keys {
		var err error
		held[i], err = holder.TryAcquire(ctx, fmt.Sprint("k", i), time.Minute)
		require.NoError(t, err)
	}
	var (
		wg   sync.WaitGroup
		errs = make(chan error, keys*perKey)
	)
	for i := range keys {
		for range perKey {
			wg.Go(func() {
				l, err := aegis.Acquire(ctx, waiters, fmt.Sprint("k", i), 10*time.Second)
				if err == nil {
					err = waiters.Release(ctx, l)
				}
				errs <- err
			})
		}
	}
	channels := make([]string, keys)
	for i := range keys {
		channels[i] = "{" + p + fmt.Sprint("k", i) + "}:released"
	}
	require.Eventually(t, func() bool {
		for _, n := range raw.PubSubNumSub(ctx, channels...).Val() {
			if n != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "each key's channel has exactly one subscriber")
	var subscribed int
	for _, line := range strings.Split(raw.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, " name="+name+" ") && !strings.Contains(line, " sub=0 ") {
			subscribed++
		}
	}
	require.Equal(t, 1, subscribed, "one pub/sub connection for %d waiters on %d keys", keys*perKey, keys)

	for _, l := range held {
		require.NoError(t, holder.Release(ctx, l))
	}
	testenv.Wait(t, &wg, time.Minute, "the waiters")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestClose: Close ends the wake-up connection and its goroutine (goleak
// checks the rest), closes the channels of waiters still registered, and
// Notify fails afterwards; leases still work.
func TestClose(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := testenv.RedisAddrs(t)[0]
	l, err := redislease.New(client(t, addr), &redislease.Config{Prefix: prefix(t)})
	require.NoError(t, err)
	require.NoError(t, l.Close(), "closing a Locker that never waited")

	l, err = redislease.New(client(t, addr), &redislease.Config{Prefix: prefix(t)})
	require.NoError(t, err)
	wake, stop, err := l.Notify(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	select {
	case _, ok := <-wake:
		require.False(t, ok, "a waiter's channel is closed by Close")
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not close a waiter's channel")
	}
	stop()
	_, _, err = l.Notify(ctx, "k")
	require.ErrorContains(t, err, "closed")
	require.NoError(t, l.Close(), "Close is idempotent")

	lease, err := l.TryAcquire(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, lease))
}

// TestErrorsHoldNoOwner: the owner value is the secret that renew and
// release compare; errors name the key, never the owner.
func TestErrorsHoldNoOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	l := locker(t, c, &redislease.Config{Prefix: prefix(t)})
	lease, err := l.TryAcquire(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	for op, err := range map[string]error{
		"renew":   l.Renew(ctx, lease, time.Second),
		"release": l.Release(ctx, lease),
	} {
		require.ErrorContains(t, err, `redislease: `+op+` "k": redis: client is closed`)
		require.NotContains(t, err.Error(), strings.Split(lease.Owner, ":")[0])
	}
	require.NotContains(t, lease.String(), strings.Split(lease.Owner, ":")[0])
}

// TestLeastPrivilegeUser runs the conformance suite, wake-ups and WAIT as a
// Redis user holding only ACLRules, then checks the server refused nothing
// and that the user can reach nothing else.
func TestLeastPrivilegeUser(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary := startRedis(t, nil)
	startRedis(t, &servers.RedisConfig{ReplicaOf: primary.Addr()})
	admin := client(t, primary.Addr())
	user, password := "aegis-"+randomHex(6), randomHex(16)
	const p = "app:"
	args := []any{"ACL", "SETUSER", user, "on", ">" + password}
	for _, r := range redislease.ACLRules(p) {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(ctx, args...).Err())
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	require.NoError(t, admin.Do(ctx, "ACL", "LOG", "RESET").Err())
	opt := &redis.Options{Addr: primary.Addr(), Username: user, Password: password}
	// The user may not run New's CONFIG GET; skipping it keeps ACL LOG
	// empty (TestEvictionPolicy shows New succeeds without skipping).
	cfg := redislease.Config{Prefix: p, SkipPolicyCheck: true}

	t.Run("locktest", func(t *testing.T) {
		locktest.Run(t, locktest.Config{
			New: func(t *testing.T) aegis.Locker {
				cfg := cfg
				cfg.WaitReplicas, cfg.WaitTimeout = 1, 5*time.Second
				return locker(t, clientWith(t, opt), &cfg)
			},
			TTL: time.Second, // long enough that a loaded machine (a second suite beside this one) does not expire a renewing holder
		})
	})
	t.Run("health check", func(t *testing.T) {
		// go-redis pings an idle pub/sub connection every 3 s.
		l := locker(t, clientWith(t, opt), &cfg)
		_, stop, err := l.Notify(ctx, "idle")
		require.NoError(t, err)
		defer stop()
		require.Eventually(t, func() bool {
			for _, line := range strings.Split(admin.ClientList(ctx).Val(), "\n") {
				if strings.Contains(line, " user="+user+" ") && strings.Contains(line, " cmd=ping ") {
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond)
	})
	log, err := admin.ACLLog(ctx, 10).Result()
	require.NoError(t, err)
	for _, e := range log {
		t.Errorf("the server refused a command of the least-privilege user: %+v", *e)
	}

	u := clientWith(t, opt)
	require.ErrorContains(t, u.Set(ctx, "other", "x", 0).Err(), "NOPERM", "keys outside the prefix")
	require.ErrorContains(t, u.Get(ctx, p+"x").Err(), "NOPERM", "the prefix without the hash tag")
	require.ErrorContains(t, u.Keys(ctx, "*").Err(), "NOPERM", "other commands")
	require.ErrorContains(t, u.FlushAll(ctx).Err(), "NOPERM")
	require.ErrorContains(t, u.Publish(ctx, "news", "x").Err(), "NOPERM", "channels outside the prefix")

	// Another prefix: the error says what is wrong, and holds no secret.
	other := locker(t, u, &redislease.Config{Prefix: "other:", SkipPolicyCheck: true})
	_, err = other.TryAcquire(ctx, "k", time.Second)
	require.ErrorContains(t, err, `redislease: acquire "k": the Redis user lacks a permission: the user may not access the keys; a grant runs EVALSHA or EVAL of a script calling SET, GET, INCR and PTTL on keys "{other:k}" and "{other:k}:fence" (see ACLRules): NOPERM`)
	require.NotContains(t, err.Error(), password)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// aclUser creates a user on the Redis at admin with rules, deleted with the
// test, and returns a client of it.
func aclUser(t *testing.T, admin *redis.Client, rules ...string) *redis.Client {
	t.Helper()
	user, password := "aegis-"+randomHex(6), randomHex(16)
	args := []any{"ACL", "SETUSER", user, "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(t.Context(), args...).Err())
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	return clientWith(t, &redis.Options{Addr: admin.Options().Addr, Username: user, Password: password})
}

// without is rules less the ones named.
func without(rules []string, drop ...string) []string {
	var out []string
	for _, r := range rules {
		if !slices.Contains(drop, r) {
			out = append(out, r)
		}
	}
	return out
}

// TestMissingPermissions: a user that lacks a permission the lease needs
// gets, at the first call that needs it and at once, an error that says
// which command, key or channel; waiting (Acquire) does not stall on a
// subscription the server refused.
func TestMissingPermissions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := client(t, startRedis(t, nil).Addr())
	const p = "app:"
	rules := redislease.ACLRules(p)
	// A bound far below the 2 s a refused SUBSCRIBE used to cost.
	const prompt = time.Second

	t.Run("no subscribe", func(t *testing.T) {
		l := locker(t, aclUser(t, admin, without(rules, "+subscribe")...), &redislease.Config{Prefix: p})
		start := time.Now()
		_, _, err := l.Notify(ctx, "k")
		require.ErrorContains(t, err, `redislease: notify "k": the Redis user lacks a permission: the user may not run SUBSCRIBE; a wait runs SUBSCRIBE on channel "{app:k}:released"`)
		require.ErrorContains(t, err, "NOPERM")
		require.Less(t, time.Since(start), prompt, "the refusal is reported when it arrives")
		_, _, err = l.Notify(ctx, "k")
		require.ErrorContains(t, err, "may not run SUBSCRIBE", "every call says so")

		start = time.Now()
		_, err = aegis.Acquire(ctx, l, "k", time.Minute)
		require.ErrorContains(t, err, "may not run SUBSCRIBE", "Acquire says why it cannot wait")
		require.Less(t, time.Since(start), prompt, "at once")

		// Without wake-ups the same user polls.
		polls := locker(t, aclUser(t, admin, without(rules, "+subscribe")...), &redislease.Config{Prefix: p, NoWakeups: true})
		held, err := polls.TryAcquire(ctx, "k", 300*time.Millisecond)
		require.NoError(t, err)
		lease, err := aegis.Acquire(ctx, polls, "k", time.Minute)
		require.NoError(t, err, "granted once the holder's lease expired")
		require.Greater(t, lease.Token, held.Token)
		require.NoError(t, polls.Release(ctx, lease))
	})
	t.Run("no channel", func(t *testing.T) {
		l := locker(t, aclUser(t, admin, without(rules, "&{"+p+"*")...), &redislease.Config{Prefix: p})
		start := time.Now()
		_, _, err := l.Notify(ctx, "k")
		require.ErrorContains(t, err, `redislease: notify "k": the Redis user lacks a permission: the user may not use the channel; a wait runs SUBSCRIBE on channel "{app:k}:released"`)
		require.Less(t, time.Since(start), prompt)
		lease, err := l.TryAcquire(ctx, "k", time.Minute)
		require.NoError(t, err)
		err = l.Release(ctx, lease)
		require.ErrorContains(t, err, `redislease: release "k": the Redis user lacks a permission: the user may not use the channel; a release runs EVALSHA or EVAL of a script calling GET, SET and DEL on keys "{app:k}" and "{app:k}:fence" and PUBLISH on channel "{app:k}:released"`)
		require.NotContains(t, err.Error(), strings.Split(lease.Owner, ":")[0])
	})
	t.Run("no script commands", func(t *testing.T) {
		l := locker(t, aclUser(t, admin, without(rules, "+set", "+incr")...), &redislease.Config{Prefix: p})
		start := time.Now()
		_, err := aegis.Acquire(ctx, l, "k", time.Minute)
		require.ErrorContains(t, err, `redislease: acquire "k": the Redis user lacks a permission: `)
		require.ErrorContains(t, err, `a grant runs EVALSHA or EVAL of a script calling SET, GET, INCR and PTTL on keys "{app:k}" and "{app:k}:fence" (see ACLRules): `)
		require.Less(t, time.Since(start), prompt, "the refusal is not delayed by the wake-up subscription")
	})
	t.Run("no evalsha", func(t *testing.T) {
		l := locker(t, aclUser(t, admin, without(rules, "+evalsha")...), &redislease.Config{Prefix: p})
		_, err := l.TryAcquire(ctx, "k", time.Minute)
		require.ErrorContains(t, err, `redislease: acquire "k": the Redis user lacks a permission: the user may not run EVALSHA; `)
	})
	t.Run("read-only", func(t *testing.T) {
		u := aclUser(t, admin, "resetkeys", "~{"+p+"*", "resetchannels", "&{"+p+"*", "-@all", "+@read", "+evalsha", "+eval", "+subscribe", "+ping")
		l := locker(t, u, &redislease.Config{Prefix: p})
		_, err := l.TryAcquire(ctx, "k", time.Minute)
		require.ErrorContains(t, err, `redislease: acquire "k": the Redis user lacks a permission: `)
		require.ErrorContains(t, err, `calling SET, GET, INCR and PTTL on keys "{app:k}" and "{app:k}:fence"`)
	})
}

// TestEvictionPolicy: New refuses a server whose maxmemory-policy can evict
// the token counters (they have no TTL), unless told to accept it; a
// volatile-* policy evicts only keys with a TTL, so it is accepted.
func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := startRedis(t, nil)
	admin := client(t, r.Addr())
	for _, policy := range []string{"allkeys-lru", "allkeys-lfu", "allkeys-random"} {
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", policy).Err())
		_, err := redislease.New(client(t, r.Addr()), nil)
		require.ErrorIs(t, err, aegis.ErrInvalid, policy)
		require.ErrorContains(t, err, "redislease: aegis: invalid argument: Redis "+r.Addr()+" has maxmemory-policy "+policy+", which can evict the token counters")
		require.ErrorContains(t, err, "Config.SkipPolicyCheck")
		locker(t, client(t, r.Addr()), &redislease.Config{SkipPolicyCheck: true})
	}
	for _, policy := range []string{"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"} {
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", policy).Err())
		locker(t, client(t, r.Addr()), nil)
	}
	// A user that may not read CONFIG is not checked (and not refused).
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	locker(t, aclUser(t, admin, redislease.ACLRules("")...), nil)
}

// TestCounterRestored: a counter deleted (or evicted) while a lease is held
// is restored to the lease's token by its renew or release, so the next
// grant continues above it. One lost while no lease is held cannot be
// told from a key never used: tokens restart at 1.
func TestCounterRestored(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := client(t, testenv.RedisAddrs(t)[0])
	p := prefix(t)
	l := locker(t, raw, &redislease.Config{Prefix: p})
	fence := "{" + p + "k}:fence"
	for range 3 {
		lease, err := l.TryAcquire(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx, lease))
	}
	lease, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 4, lease.Token)

	require.NoError(t, raw.Del(ctx, fence).Err())
	require.NoError(t, l.Renew(ctx, lease, time.Minute))
	require.Equal(t, "4", raw.Get(ctx, fence).Val(), "the renewal restored the counter")
	require.NoError(t, raw.Set(ctx, fence, 1, 0).Err())
	require.NoError(t, l.Release(ctx, lease))
	require.Equal(t, "4", raw.Get(ctx, fence).Val(), "the release restored a counter below its token")
	next, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 5, next.Token, "the order continues")
	require.NoError(t, l.Release(ctx, next))

	require.NoError(t, raw.Del(ctx, fence).Err())
	again, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, again.Token, "lost while free: undetectable, tokens restart")
	require.NoError(t, l.Release(ctx, again))
}

// TestLostSaysWhy: ErrLost names the key and what Redis found, never the
// owner value.
func TestLostSaysWhy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := client(t, testenv.RedisAddrs(t)[0])
	p := prefix(t)
	l := locker(t, raw, &redislease.Config{Prefix: p})
	lease, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	secret := strings.Split(lease.Owner, ":")[0]

	require.NoError(t, raw.Set(ctx, "{"+p+"k}", "someone", time.Minute).Err())
	for _, err := range []error{l.Renew(ctx, lease, time.Minute), l.Release(ctx, lease)} {
		require.ErrorIs(t, err, aegis.ErrLost)
		require.Regexp(t, `^redislease: (renew|release) "k": aegis: lease lost: another owner holds the key$`, err.Error())
		require.NotContains(t, err.Error(), secret)
	}
	require.NoError(t, raw.Del(ctx, "{"+p+"k}").Err())
	for _, err := range []error{l.Renew(ctx, lease, time.Minute), l.Release(ctx, lease)} {
		require.ErrorIs(t, err, aegis.ErrLost)
		require.Regexp(t, `^redislease: (renew|release) "k": aegis: lease lost: the key is gone`, err.Error())
	}
	forged := *lease
	forged.Token++
	err = l.Renew(ctx, &forged, time.Minute)
	require.ErrorIs(t, err, aegis.ErrLost)
	require.ErrorContains(t, err, `redislease: renew "k": aegis: lease lost: the lease's owner does not match its token`)
}
