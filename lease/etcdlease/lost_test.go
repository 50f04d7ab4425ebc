package etcdlease_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/tool/testenv"
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
