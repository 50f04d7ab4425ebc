package etcdzk_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/aegislab/aegis/internal/tool/latency"
	"github.com/aegislab/aegis/lease/etcdlease"
	"github.com/aegislab/aegis/lease/zklease"
)

const ttl = time.Minute

func run() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func etcdClient(b *testing.B) *clientv3.Client {
	eps := strings.Split(cmp.Or(os.Getenv("AEGIS_ETCD_ENDPOINTS"), "http://127.0.0.1:12379,http://127.0.0.1:12381,http://127.0.0.1:12383"), ",")
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func zkServers() []string {
	return strings.Split(cmp.Or(os.Getenv("AEGIS_ZK_SERVERS"), "127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183"), ",")
}

// BenchmarkEtcd: etcdlease against concurrency.Mutex, a session per
// operation (the same lease-per-grant semantics) and a shared session.
func BenchmarkEtcd(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			b.Run("etcdlease", func(b *testing.B) {
				l, err := etcdlease.New(etcdClient(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				r := run()
				latency.Bench(b, n, func(g int) error {
					lease, err := l.TryAcquire(ctx, fmt.Sprintf("bench/%s/%d", r, g), ttl)
					if err != nil {
						return err
					}
					return l.Release(ctx, lease)
				})
			})
			b.Run("mutex-session-per-op", func(b *testing.B) {
				c := etcdClient(b)
				r := run()
				latency.Bench(b, n, func(g int) error {
					s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
					if err != nil {
						return err
					}
					defer s.Close()
					m := concurrency.NewMutex(s, fmt.Sprintf("bench-mutex/%s/%d", r, g))
					if err := m.Lock(ctx); err != nil {
						return err
					}
					return m.Unlock(ctx)
				})
			})
			b.Run("mutex-shared-session", func(b *testing.B) {
				c := etcdClient(b)
				sessions := make([]*concurrency.Session, n)
				for g := range sessions {
					s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					sessions[g] = s
				}
				r := run()
				latency.Bench(b, n, func(g int) error {
					m := concurrency.NewMutex(sessions[g], fmt.Sprintf("bench-mutex/%s/%d", r, g))
					if err := m.Lock(ctx); err != nil {
						return err
					}
					return m.Unlock(ctx)
				})
			})
		})
	}
}

// BenchmarkZooKeeper: zklease against go-zookeeper's zk.Lock, each on a
// connection of its own.
func BenchmarkZooKeeper(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			b.Run("zklease", func(b *testing.B) {
				conn, cfg, err := zklease.Connect(zkServers(), ttl, zk.WithLogger(quiet{}))
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				l, err := zklease.New(conn, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				r := run()
				latency.Bench(b, n, func(g int) error {
					lease, err := l.TryAcquire(ctx, fmt.Sprintf("bench/%s/%d", r, g), ttl)
					if err != nil {
						return err
					}
					return l.Release(ctx, lease)
				})
			})
			b.Run("zk.Lock", func(b *testing.B) {
				conn, _, err := zk.Connect(zkServers(), ttl, zk.WithLogger(quiet{}))
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				r := run()
				latency.Bench(b, n, func(g int) error {
					m := zk.NewLock(conn, fmt.Sprintf("/bench-zklock/%s/%d", r, g), zk.WorldACL(zk.PermAll))
					if err := m.Lock(); err != nil {
						return err
					}
					return m.Unlock()
				})
			})
		})
	}
}
