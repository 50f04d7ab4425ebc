package etcdlease_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/etcdlease"
)

// TestStaleLeaseIsLost renews, with the grant's own TTL (the keep-alive
// path) and with another one (the move path), and releases a lease whose key
// is gone: after its own release, after a successor's grant from another
// Locker, and after its etcd lease expired with no successor. Each is
// ErrLost saying why, never a panic, and a successor stays intact.
func TestStaleLeaseIsLost(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	endpoints := testenv.EtcdEndpoints(t)

	check := func(t *testing.T, name string, err error, reason string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrLost, name)
		require.ErrorContains(t, err, reason, name)
	}

	t.Run("AfterOwnRelease", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a := locker(t, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx, lease))
		check(t, "renew, same ttl", a.Renew(ctx, lease, ttl), "key deleted or taken")
		check(t, "renew, other ttl", a.Renew(ctx, lease, 3*ttl), "key deleted or taken")
		check(t, "release", a.Release(ctx, lease), "key deleted or taken")
	})

	t.Run("AfterSuccessor", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a, b, c := locker(t, nil), locker(t, nil), locker(t, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		var next *aegis.Lease
		require.Eventually(t, func() bool {
			next, err = b.TryAcquire(ctx, key, 10*ttl)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "the successor is granted the key after the first lease expires")
		check(t, "renew, same ttl", a.Renew(ctx, lease, ttl), "key deleted or taken")
		check(t, "renew, other ttl", a.Renew(ctx, lease, 3*ttl), "key deleted or taken")
		check(t, "release", a.Release(ctx, lease), "key deleted or taken")
		_, err = c.TryAcquire(ctx, key, ttl)
		require.ErrorIs(t, err, aegis.ErrHeld, "the successor is intact")
		require.NoError(t, b.Renew(ctx, next, 10*ttl), "the successor still holds")
		require.NoError(t, b.Release(ctx, next))
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a := locker(t, nil)
		watcher := client(t, endpoints)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			resp, err := watcher.Get(ctx, "aegis/lease/"+key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && resp.Count == 0
		}, 10*time.Second, 10*time.Millisecond, "the etcd lease expires and takes the key with it")
		check(t, "renew, same ttl", a.Renew(ctx, lease, ttl), "key deleted or taken")
		check(t, "renew, other ttl", a.Renew(ctx, lease, 3*ttl), "key deleted or taken")
		check(t, "release", a.Release(ctx, lease), "key deleted or taken")
	})
}

// TestClosedPortSaysWhy runs a Locker on a client whose only endpoint is a
// closed loopback port: the error names the endpoint and the refusal, not
// only the context's deadline.
func TestClosedPortSaysWhy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	l, err := etcdlease.New(c, nil)
	require.NoError(t, err)
	for name, call := range map[string]func(context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, testenv.Key(t), time.Second); return err },
		"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, testenv.Key(t), time.Second); return err },
		"Renew": func(ctx context.Context) error {
			return l.Renew(ctx, &aegis.Lease{Key: testenv.Key(t), Token: 1, Owner: "0000000000000001." + strings.Repeat("a", 32), TTL: time.Second}, time.Second)
		},
		"Release": func(ctx context.Context) error {
			return l.Release(ctx, &aegis.Lease{Key: testenv.Key(t), Token: 1, Owner: "0000000000000001." + strings.Repeat("a", 32), TTL: time.Second})
		},
	} {
		ctx, cancel := context.WithTimeout(bounded(t), 300*time.Millisecond)
		err := call(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.ErrorContains(t, err, addr, name)
		require.ErrorContains(t, err, "connection refused", name)
	}
}

// bounded is a context that ends with the test or after a minute, so a
// hung call fails the test instead of the package's timeout.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestUnreachableIsBounded calls every method of a Locker, in both modes,
// with a context that has no deadline, on a client whose only endpoint is
// a closed loopback port or a port that accepts and never answers: each
// call gives up after Config.RequestTimeout, with an error that names the
// endpoint (not its password) and is not ErrHeld. The first case is the
// probe's own call: TryAcquire(context.Background(), key, 2s) with the
// default configuration.
func TestUnreachableIsBounded(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())
	// A listener that never calls Accept: the kernel completes the
	// handshake, and nothing ever answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })

	forged := func(key string) *aegis.Lease {
		return &aegis.Lease{Key: key, Token: 1, Owner: "0000000000000001." + strings.Repeat("a", 32), TTL: ttl, Deadline: time.Now().Add(ttl)}
	}
	unreachable := func(t *testing.T, addr string, cfg *etcdlease.Config) *etcdlease.Locker {
		// The user and password in the URL must not show in errors.
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://aegis:s3cret@" + addr}, Logger: zap.NewNop()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() }) // ends a call that hangs, after the test failed
		l, err := etcdlease.New(c, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	check := func(t *testing.T, name, addr string, call func(context.Context) error, within time.Duration) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- call(context.Background()) }()
		err := testenv.Recv(t, done, time.Minute, name+" to give up (its bound is "+within.String()+")")
		require.Error(t, err, name)
		require.NotErrorIs(t, err, aegis.ErrHeld, name)
		require.ErrorContains(t, err, addr, name)
		require.ErrorContains(t, err, "no answer from etcd within "+within.String(), name)
		require.NotContains(t, err.Error(), "s3cret", name)
	}
	for _, addr := range []string{closedAddr, silent.Addr().String()} {
		t.Run(addr+"/default", func(t *testing.T) {
			t.Parallel()
			l := unreachable(t, addr, nil)
			check(t, "TryAcquire", addr, func(ctx context.Context) error { _, err := l.TryAcquire(ctx, testenv.Key(t), ttl); return err }, 5*time.Second)
		})
		for _, session := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/session=%t", addr, session), func(t *testing.T) {
				t.Parallel()
				l := unreachable(t, addr, &etcdlease.Config{Session: session, RequestTimeout: time.Second})
				calls := map[string]func(context.Context) error{
					"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, testenv.Key(t), ttl); return err },
					"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, testenv.Key(t), ttl); return err },
					"Hold":       func(ctx context.Context) error { _, err := aegis.Hold(ctx, l, testenv.Key(t), ttl); return err },
				}
				if !session { // a session's Renew and Release of a lease it never granted ask nothing
					calls["Renew"] = func(ctx context.Context) error { return l.Renew(ctx, forged(testenv.Key(t)), ttl) }
					calls["Release"] = func(ctx context.Context) error { return l.Release(ctx, forged(testenv.Key(t))) }
				}
				for name, call := range calls {
					check(t, name, addr, call, time.Second)
				}
			})
		}
	}
}
