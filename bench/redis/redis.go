// Package redisbench compares lease/redislease and lease/redlock with the Go
// Redis locks that others use (bsm/redislock, go-redsync/redsync) and with
// the raw go-redis floor, on the same Redis servers in the same run.
//
// Two measures:
//
//   - acquire+release: one acquire and one release of a free key, each
//     goroutine on a key of its own; throughput and p50/p99 of the pair.
//   - handoff: goroutines contend for one key with each library's way of
//     waiting (its default retry, or its wake-ups); the latency from the
//     moment a holder starts its release to the moment another goroutine's
//     acquire returns. pglease (on AEGIS_POSTGRES_URL) and sqlitelease (on
//     a file of its own) contend in the same harness, so that the SQL
//     leases' handoff is measured beside redislease's.
//
// The Go benchmarks (go test -bench . ./redis) measure one subject at a
// time; the compare command (go run ./redis/compare) interleaves subjects
// in rounds, so that load from elsewhere on the machine falls on all of
// them alike, and prints the table with ratios.
package redisbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/internal/testing/latency/measure"
	"github.com/aegislab/aegis/lease/redislease"
	"github.com/aegislab/aegis/lease/redlock"
)

// TTL is the TTL of every lease in the benchmarks: long enough that none
// expires while it is measured.
const TTL = time.Minute

// Servers are the Redis servers of the benchmarks.
type Servers struct {
	Single string   // the single-node subjects' server
	Nodes  []string // the five Redlock nodes
	// Postgres is the URL of the PostgreSQL of the pglease handoff
	// contender.
	Postgres string
}

// ServersFromEnv reads AEGIS_REDIS_ADDRS (default: the shared test set of
// scripts/services): the first address is the single node, the next five
// the Redlock nodes; and AEGIS_POSTGRES_URL (default: the shared test
// server).
func ServersFromEnv() (Servers, error) {
	v := os.Getenv("AEGIS_REDIS_ADDRS")
	if v == "" {
		v = "127.0.0.1:16379,127.0.0.1:16380,127.0.0.1:16381,127.0.0.1:16382,127.0.0.1:16383,127.0.0.1:16384"
	}
	addrs := strings.Split(v, ",")
	if len(addrs) < 6 {
		return Servers{}, fmt.Errorf("AEGIS_REDIS_ADDRS lists %d servers; the benchmarks need 6 (one single node, five Redlock nodes)", len(addrs))
	}
	pg := os.Getenv("AEGIS_POSTGRES_URL")
	if pg == "" {
		pg = "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable"
	}
	return Servers{Single: addrs[0], Nodes: addrs[1:6], Postgres: pg}, nil
}

// Env is the clients of one benchmark run. Close closes them.
type Env struct {
	servers Servers
	run     string // a random key prefix of this run
	single  *redis.Client
	nodes   []redis.UniversalClient
	closers []func()
}

// NewEnv connects to s. Every subject shares these clients (and their
// pools), as a service would.
func NewEnv(s Servers) *Env {
	e := &Env{servers: s, run: "aegis-bench:" + randomHex(6) + ":"}
	e.single = redis.NewClient(&redis.Options{Addr: s.Single, PoolSize: 64})
	e.closers = append(e.closers, func() { e.single.Close() })
	for _, a := range s.Nodes {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: 64})
		e.nodes = append(e.nodes, c)
		e.closers = append(e.closers, func() { c.Close() })
	}
	return e
}

// Close closes the clients and everything the subjects opened.
func (e *Env) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// ServerCPU returns the CPU time (user and system) the servers of the
// given subject kind have used so far: the single node for nodes == 1,
// the five Redlock nodes otherwise. Only meaningful when nothing else uses
// the servers.
func (e *Env) ServerCPU(ctx context.Context, nodes int) (time.Duration, error) {
	clients := []redis.UniversalClient{e.single}
	if nodes > 1 {
		clients = e.nodes
	}
	var total time.Duration
	for _, c := range clients {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu: %s: %w", line, err)
				}
				total += time.Duration(f * float64(time.Second))
			}
		}
	}
	return total, nil
}

// Key returns a key of this run.
func (e *Env) Key(name string) string { return e.run + name }

// An Op acquires the key of goroutine g and releases it.
type Op func(ctx context.Context, g int) error

// Subject is one lock measured by acquire+release.
type Subject struct {
	ID   string // for benchmark names
	Name string
	// Nodes is 1 for the single-node subjects, 5 for Redlock.
	Nodes int
	// New returns the operation for the given number of goroutines.
	New func(goroutines int) (Op, error)
}

// keys returns one key per goroutine for a subject.
func (e *Env) keys(subject string, goroutines int) []string {
	ks := make([]string, goroutines)
	for g := range ks {
		ks[g] = e.Key(fmt.Sprintf("%s/%d", subject, g))
	}
	return ks
}

// rawRelease is the compare-and-delete of the Redis documentation's lock.
var rawRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// Subjects are the acquire+release subjects, in the order of the table.
func (e *Env) Subjects() []Subject {
	return []Subject{
		{ID: "redislease", Name: "redislease", Nodes: 1, New: func(n int) (Op, error) {
			l, err := redislease.New(e.single, &redislease.Config{Prefix: e.run})
			if err != nil {
				return nil, err
			}
			e.closers = append(e.closers, func() { l.Close() })
			return leaseOp(l, e.keys("redislease", n)), nil
		}},
		{ID: "raw", Name: "raw go-redis (SET NX PX + compare-and-delete, no token)", Nodes: 1, New: func(n int) (Op, error) {
			keys := e.keys("raw", n)
			return func(ctx context.Context, g int) error {
				value := randomHex(16) // what every lock does: a random owner per grant
				ok, err := e.single.SetNX(ctx, keys[g], value, TTL).Result()
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("raw: %s is held", keys[g])
				}
				n, err := rawRelease.Run(ctx, e.single, []string{keys[g]}, value).Int64()
				if err == nil && n != 1 {
					err = fmt.Errorf("raw: %s was not ours", keys[g])
				}
				return err
			}, nil
		}},
		{ID: "bsm", Name: "bsm/redislock", Nodes: 1, New: func(n int) (Op, error) {
			c := redislock.New(e.single)
			keys := e.keys("bsm", n)
			return func(ctx context.Context, g int) error {
				lock, err := c.Obtain(ctx, keys[g], TTL, nil)
				if err != nil {
					return err
				}
				return lock.Release(ctx)
			}, nil
		}},
		{ID: "redsync1", Name: "redsync (1 node)", Nodes: 1, New: func(n int) (Op, error) {
			return e.redsyncOp(e.keys("redsync1", n), []redis.UniversalClient{e.single}), nil
		}},
		{ID: "redlock5", Name: "redlock (5 nodes)", Nodes: 5, New: func(n int) (Op, error) {
			l, err := redlock.New(e.nodes, &redlock.Config{Prefix: e.run})
			if err != nil {
				return nil, err
			}
			e.closers = append(e.closers, func() { l.Close() })
			return leaseOp(l, e.keys("redlock", n)), nil
		}},
		{ID: "redsync5", Name: "redsync (5 nodes)", Nodes: 5, New: func(n int) (Op, error) {
			return e.redsyncOp(e.keys("redsync5", n), e.nodes), nil
		}},
	}
}

func leaseOp(l aegis.Locker, keys []string) Op {
	return func(ctx context.Context, g int) error {
		lease, err := l.TryAcquire(ctx, keys[g], TTL)
		if err != nil {
			return err
		}
		return l.Release(ctx, lease)
	}
}

// redsyncOp is one redsync mutex per goroutine, tried once (the key is
// free), with its default value generator and timeouts.
func (e *Env) redsyncOp(keys []string, clients []redis.UniversalClient) Op {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	mutexes := make([]*redsync.Mutex, len(keys))
	for g, k := range keys {
		mutexes[g] = rs.NewMutex(k, redsync.WithExpiry(TTL), redsync.WithTries(1))
	}
	return func(ctx context.Context, g int) error {
		m := mutexes[g]
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redsync: unlock of %s failed", keys[g])
		}
		return err
	}
}

// Measure calls op from the given number of goroutines for d, recording
// each call's latency in rec, and returns the number of calls and the time
// they took (measure.For: calls are not cut short; it stops at the first
// error).
func Measure(ctx context.Context, op Op, goroutines int, d time.Duration, rec *latency.Recorder) (int, time.Duration, error) {
	return measure.For(ctx, goroutines, d, op, &rec.Recorder)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
