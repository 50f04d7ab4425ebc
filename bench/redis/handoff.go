package redisbench

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/redislease"
	"github.com/aegislab/aegis/lease/redlock"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// Acquire blocks until the contended key is granted (waiting the way the
// library waits) and returns the function that releases it. A retryable
// failure (a library that gives up after its tries) returns errRetry.
type Acquire func(ctx context.Context) (release func(context.Context) error, err error)

var errRetry = errors.New("gave up; try again")

// Hold is the mean time a holder works under the lease in the handoff
// measure.
const Hold = 5 * time.Millisecond

// Contender is one lock in the handoff measure.
type Contender struct {
	ID   string // for benchmark names
	Name string
	// Waiting says how the library waits for a held key.
	Waiting string
	// New returns the acquire of the shared key for goroutine g; lockers
	// are shared by the goroutines where the library allows it, as in one
	// process.
	New func(key string) (func(g int) Acquire, error)
}

// Contenders are the handoff subjects, in the order of the table.
func (e *Env) Contenders() []Contender {
	return []Contender{
		{ID: "redislease", Name: "redislease", Waiting: "aegis.Acquire: woken by the release's PUBLISH (one pub/sub connection per Locker)",
			New: func(key string) (func(int) Acquire, error) {
				l, err := redislease.New(e.single, &redislease.Config{Prefix: e.run})
				if err != nil {
					return nil, err
				}
				e.closers = append(e.closers, func() { l.Close() })
				return func(int) Acquire { return aegisAcquire(l, key) }, nil
			}},
		{ID: "pglease", Name: "pglease", Waiting: "its own Acquire: a queue row per waiter, woken by the release's NOTIFY (one LISTEN connection per Locker)",
			New: func(key string) (func(int) Acquire, error) {
				cfg, err := pgxpool.ParseConfig(e.servers.Postgres)
				if err != nil {
					return nil, errors.New("AEGIS_POSTGRES_URL does not parse") // the URL may hold a password: not quoted
				}
				cfg.MaxConns = 16 // 8 waiters, a release and the LISTEN connection, as a service would size it
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					return nil, err
				}
				e.closers = append(e.closers, pool.Close)
				l, err := pglease.New(pool, &pglease.Config{Table: "aegis_bench_lease"})
				if err != nil {
					return nil, err
				}
				return func(int) Acquire { return aegisAcquire(l, key) }, nil
			}},
		{ID: "sqlitelease", Name: "sqlitelease", Waiting: "its own Acquire: a queue row per waiter, polling every 2-50ms (SQLite has no notifications)",
			New: func(key string) (func(int) Acquire, error) {
				dir, err := os.MkdirTemp("", "aegis-bench-sqlite")
				if err != nil {
					return nil, err
				}
				db, err := sqlitelease.Open(filepath.Join(dir, "leases.db"))
				if err != nil {
					os.RemoveAll(dir)
					return nil, err
				}
				e.closers = append(e.closers, func() { db.Close(); os.RemoveAll(dir) })
				l, err := sqlitelease.New(db, nil)
				if err != nil {
					return nil, err
				}
				return func(int) Acquire { return aegisAcquire(l, key) }, nil
			}},
		{ID: "bsm-linear100ms", Name: "bsm/redislock", Waiting: "no retry by default; its example's LinearBackoff(100ms)",
			New: func(key string) (func(int) Acquire, error) {
				return bsmAcquire(redislock.New(e.single), key, func() redislock.RetryStrategy { return redislock.LinearBackoff(100 * time.Millisecond) }), nil
			}},
		{ID: "bsm-exp16ms", Name: "bsm/redislock", Waiting: "ExponentialBackoff(16ms, 512ms), its recommended minimum",
			New: func(key string) (func(int) Acquire, error) {
				return bsmAcquire(redislock.New(e.single), key, func() redislock.RetryStrategy {
					return redislock.ExponentialBackoff(16*time.Millisecond, 512*time.Millisecond)
				}), nil
			}},
		{ID: "redsync1", Name: "redsync (1 node)", Waiting: "default: 32 tries, 50-250ms random delay",
			New: func(key string) (func(int) Acquire, error) {
				rs := redsync.New(goredis.NewPool(e.single))
				return func(int) Acquire { return redsyncAcquire(rs, key) }, nil
			}},
		{ID: "redlock5", Name: "redlock (5 nodes)", Waiting: "aegis.Acquire: jittered backoff 5-250ms, no wake-ups",
			New: func(key string) (func(int) Acquire, error) {
				l, err := redlock.New(e.nodes, &redlock.Config{Prefix: e.run})
				if err != nil {
					return nil, err
				}
				e.closers = append(e.closers, func() { l.Close() })
				return func(int) Acquire { return aegisAcquire(l, key) }, nil
			}},
		{ID: "redsync5", Name: "redsync (5 nodes)", Waiting: "default: 32 tries, 50-250ms random delay",
			New: func(key string) (func(int) Acquire, error) {
				pools := make([]redsyncredis.Pool, len(e.nodes))
				for i, c := range e.nodes {
					pools[i] = goredis.NewPool(c)
				}
				rs := redsync.New(pools...)
				return func(int) Acquire { return redsyncAcquire(rs, key) }, nil
			}},
	}
}

func aegisAcquire(l aegis.Locker, key string) Acquire {
	return func(ctx context.Context) (func(context.Context) error, error) {
		lease, err := aegis.Acquire(ctx, l, key, TTL)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return l.Release(ctx, lease) }, nil
	}
}

func bsmAcquire(c *redislock.Client, key string, retry func() redislock.RetryStrategy) func(int) Acquire {
	return func(int) Acquire {
		return func(ctx context.Context) (func(context.Context) error, error) {
			lock, err := c.Obtain(ctx, key, TTL, &redislock.Options{RetryStrategy: retry()})
			if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
				return nil, errRetry
			}
			if err != nil {
				return nil, err
			}
			return lock.Release, nil
		}
	}
}

func redsyncAcquire(rs *redsync.Redsync, key string) Acquire {
	return func(ctx context.Context) (func(context.Context) error, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(TTL))
		if err := m.LockContext(ctx); err != nil {
			if ctx.Err() == nil {
				return nil, errRetry // ErrFailed after 32 tries, or ErrTaken
			}
			return nil, err
		}
		return func(ctx context.Context) error {
			_, err := m.UnlockContext(ctx)
			return err
		}, nil
	}
}

// Handoff runs goroutines contending for one key until ctx ends and
// records in rec, for every grant to a goroutine other than the previous
// holder, the time from the start of the previous holder's release to the
// return of the new holder's acquire. Each holder works for hold (±50%,
// random) before it releases, so that pollers' retries fall at random
// moments of the release, as they do when the work takes time. A goroutine
// that released waits until another one holds the key before it contends
// again, so that every grant is a handoff and the others are always
// waiting. It stops after limit handoffs (0: no limit) and returns their
// number.
func Handoff(ctx context.Context, acquire func(g int) Acquire, goroutines, limit int, hold time.Duration, rec *latency.Recorder) (int, error) {
	var (
		mu       sync.Mutex
		holder   = -1
		released time.Time
		taken    = make(chan struct{}) // closed at each grant
		count    int
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for g := range goroutines {
		acq := acquire(g)
		wg.Go(func() {
			for ctx.Err() == nil {
				release, err := acq(ctx)
				if errors.Is(err, errRetry) {
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				now := time.Now()
				mu.Lock()
				if holder >= 0 && holder != g {
					rec.Add(now.Sub(released))
					count++
					if count == limit {
						cancel()
					}
				}
				holder = g
				close(taken)
				taken = make(chan struct{})
				wait := taken
				mu.Unlock()
				time.Sleep(hold/2 + rand.N(hold+1)) // the work under the lease
				mu.Lock()
				released = time.Now()
				mu.Unlock()
				if err := release(context.WithoutCancel(ctx)); err != nil && ctx.Err() == nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				// Step back until another goroutine holds the key.
				for {
					mu.Lock()
					other := holder != g
					mu.Unlock()
					if other {
						break
					}
					select {
					case <-wait:
					case <-ctx.Done():
						return
					}
					mu.Lock()
					wait = taken
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return count, firstErr
}
