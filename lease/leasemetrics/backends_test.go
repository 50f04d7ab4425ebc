package leasemetrics_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/etcdlease"
	"github.com/aegislab/aegis/lease/leasemetrics"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/redislease"
	"github.com/aegislab/aegis/lease/redlock"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/lease/zklease"
)

// quiet drops the ZooKeeper client's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// backends are the real Lockers, each on the servers its own tests use,
// closed with the test.
var backends = []struct {
	name string
	new  func(t *testing.T) aegis.Locker
}{
	{"postgres", func(t *testing.T) aegis.Locker {
		pool, err := pgxpool.New(t.Context(), testenv.PostgresURL(t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		l, err := pglease.New(pool, nil)
		require.NoError(t, err)
		return l
	}},
	{"sqlite", func(t *testing.T) aegis.Locker {
		db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "lease.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		l, err := sqlitelease.New(db, nil)
		require.NoError(t, err)
		return l
	}},
	{"redis", func(t *testing.T) aegis.Locker {
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
		t.Cleanup(func() { _ = c.Close() })
		l, err := redislease.New(c, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}},
	{"redlock", func(t *testing.T) aegis.Locker {
		addrs := testenv.RedisAddrs(t)
		require.GreaterOrEqual(t, len(addrs), 6, "AEGIS_REDIS_ADDRS: the shared set has six servers, five of them for Redlock")
		var cs []redis.UniversalClient
		for _, a := range addrs[1:6] {
			c := redis.NewClient(&redis.Options{Addr: a, DialerRetries: 1})
			t.Cleanup(func() { _ = c.Close() })
			cs = append(cs, c)
		}
		l, err := redlock.New(cs, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}},
	{"etcd", func(t *testing.T) aegis.Locker {
		c, err := clientv3.New(clientv3.Config{Endpoints: testenv.EtcdEndpoints(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		l, err := etcdlease.New(c, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}},
	{"zookeeper", func(t *testing.T) aegis.Locker {
		conn, cfg, err := zklease.Connect(testenv.ZKServers(t), 30*time.Second, zk.WithLogger(quiet{}))
		require.NoError(t, err)
		l, err := zklease.New(conn, cfg)
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, l.Close())
			conn.Close()
		})
		return l
	}},
}

// Wrapped around each real backend, the metrics count a grant, a
// contended refusal, a renewal and a loss (the lease ran out and another
// owner took the key, so Renew and Release are refused), under the
// backend's label.
func TestCountsOnEveryBackend(t *testing.T) {
	t.Parallel()
	// One second: the shortest TTL etcd grants (whole seconds).
	const ttl = time.Second
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			raw := b.new(t)
			reg := prometheus.NewRegistry()
			l, err := leasemetrics.Wrap(raw, b.name, reg)
			require.NoError(t, err)
			count := func(name, label, value string) float64 {
				return counter(t, reg, name, map[string]string{"backend": b.name, label: value})
			}
			key := testenv.Key(t)

			first, err := l.TryAcquire(ctx, key, ttl)
			require.NoError(t, err)
			_, err = l.TryAcquire(ctx, key, ttl)
			require.ErrorIs(t, err, aegis.ErrHeld)
			require.NoError(t, l.Renew(ctx, first, ttl))
			require.EqualValues(t, 1, count("aegis_lease_acquire_total", "result", "granted"))
			require.EqualValues(t, 1, count("aegis_lease_acquire_total", "result", "held"))
			require.EqualValues(t, 1, count("aegis_lease_renew_total", "result", "renewed"))
			require.EqualValues(t, 1, count("aegis_lease_op_seconds", "op", "renew"))

			// Nobody renews first: once it has run out, another owner
			// (through the unwrapped Locker, so the counts above stay as
			// they are) is granted the key.
			var second *aegis.Lease
			require.Eventually(t, func() bool {
				second, err = raw.TryAcquire(ctx, key, 10*time.Second)
				return !errors.Is(err, aegis.ErrHeld) // granted, or an error that fails below
			}, 30*time.Second, 50*time.Millisecond, "the first lease runs out (ttl %s) and the key is granted again", ttl)
			require.NoError(t, err)
			require.Greater(t, second.Token, first.Token)
			require.ErrorIs(t, l.Renew(ctx, first, ttl), aegis.ErrLost)
			require.ErrorIs(t, l.Release(ctx, first), aegis.ErrLost)
			require.EqualValues(t, 1, count("aegis_lease_renew_total", "result", "lost"))
			require.EqualValues(t, 1, count("aegis_lease_release_total", "result", "lost"))
			require.EqualValues(t, 1, count("aegis_lease_lost_total", "cause", "renew_refused"))
			require.EqualValues(t, 1, count("aegis_lease_lost_total", "cause", "release_refused"))
			require.Zero(t, count("aegis_lease_renew_total", "result", "error"))
			require.Zero(t, count("aegis_lease_acquire_total", "result", "error"))

			// The successor's release, through the wrapper, is counted as
			// one.
			require.NoError(t, l.Release(ctx, second))
			require.EqualValues(t, 1, count("aegis_lease_release_total", "result", "released"))
			require.EqualValues(t, 1, count("aegis_lease_acquire_total", "result", "granted"), "the unwrapped grant is not counted")
		})
	}
}
