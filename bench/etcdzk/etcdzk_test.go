package etcdzk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aegislab/aegis/bench/etcdzk"
	"github.com/aegislab/aegis/internal/testing/latency"
)

// BenchmarkEtcd: etcdlease in both modes against concurrency.Mutex, a
// session per lock and a session per goroutine reused for every lock.
func BenchmarkEtcd(b *testing.B) { bench(b, "etcd", "mutex") }

// BenchmarkZooKeeper: zklease against go-zookeeper's zk.Lock, each on a
// connection of its own.
func BenchmarkZooKeeper(b *testing.B) { bench(b, "zk") }

func bench(b *testing.B, prefixes ...string) {
	ctx := context.Background()
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			for _, s := range etcdzk.Subjects() {
				if !hasPrefix(s.ID, prefixes) {
					continue
				}
				b.Run(s.ID, func(b *testing.B) {
					op, closeFn, err := s.New(n)
					if err != nil {
						b.Fatal(err)
					}
					defer closeFn()
					latency.Bench(b, n, func(g int) error { return op(ctx, g) })
				})
			}
		})
	}
}

func hasPrefix(id string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}
