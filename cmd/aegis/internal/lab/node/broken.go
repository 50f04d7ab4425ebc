package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/lease/redislease"
)

// Three Lockers that are wrong ON PURPOSE, for the presets that show the
// classic mistakes of hand-written locks. Do not copy them: each comment
// says what is wrong and what the correct Locker does instead.
//
//   - redisDel: SET NX PX and an INCR token, then renew with a bare
//     PEXPIRE and unlock with a bare DEL, comparing no owner.
//   - failOpen: redislease, but when Redis cannot be reached it grants
//     anyway ("run unlocked while Redis is down").
//   - noBump: a PostgreSQL lease row whose reaper takes over an expired
//     lease keeping its token.

// redisPrefixDel is the prefix of redisDel's keys in the lab.
const redisPrefixDel = "aegis-lab-del:"

// firstRedisAddr is the single-node Redis address of the node's
// environment (the first of AEGIS_REDIS_ADDRS, the lab's proxy).
func firstRedisAddr() (string, error) {
	for _, a := range backend.FromEnv().RedisAddrs {
		if a = strings.TrimSpace(a); a != "" {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w: no Redis address (AEGIS_REDIS_ADDRS)", aegis.ErrInvalid)
}

// openRedisDel opens redisDel on the first Redis address. Like the redis
// backend it checks that Redis answers, so a run without Redis fails at
// once.
func openRedisDel(ctx context.Context, _ *node) (aegis.Locker, func(), error) {
	addr, err := firstRedisAddr()
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return newRedisDel(c, redisPrefixDel), func() { _ = c.Close() }, nil
}

// redisDel is the Redis lock as a hurried user writes it with go-redis,
// WRONG ON PURPOSE. The grant is right (SET key owner NX PX ttl, then INCR
// of a counter for the token), but Renew is PEXPIRE and Release is DEL,
// neither checking that the key still holds this grant's owner. A holder
// whose lease expired and was granted to B then extends B's key (Renew)
// or deletes it (Release), and a third node C is granted the key while B
// still holds it: two holders. redislease does both as one script that
// compares the owner value (compare-and-PEXPIRE, compare-and-DEL) and
// returns aegis.ErrLost when it is not this grant's.
//
// The grant's two commands are not atomic either (a crash between them
// leaves a lock without a token), which the lab does not exercise.
type redisDel struct {
	c      *redis.Client
	prefix string
}

func newRedisDel(c *redis.Client, prefix string) *redisDel { return &redisDel{c: c, prefix: prefix} }

func (r *redisDel) lockKey(key string) string  { return r.prefix + key }
func (r *redisDel) fenceKey(key string) string { return r.prefix + key + ":fence" }

func (r *redisDel) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	id := owner.New()
	start := time.Now()
	ok, err := r.c.SetNX(ctx, r.lockKey(key), id, ttl).Result()
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	if !ok {
		return nil, aegis.ErrHeld
	}
	token, err := r.c.Incr(ctx, r.fenceKey(key)).Result()
	if err != nil {
		return nil, fmt.Errorf("acquire %q: token: %w", key, err)
	}
	return &aegis.Lease{Key: key, Token: aegis.Token(token), Owner: id, TTL: ttl, Deadline: driver.LocalDeadline(start, ttl)}, nil
}

// Renew is the first mistake: PEXPIRE extends whoever holds the key now.
func (r *redisDel) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return err
	}
	start := time.Now()
	ok, err := r.c.PExpire(ctx, r.lockKey(l.Key), ttl).Result()
	if err != nil {
		return fmt.Errorf("renew %q: %w", l.Key, err)
	}
	if !ok {
		return fmt.Errorf("renew %q: %w: the key is gone", l.Key, aegis.ErrLost)
	}
	l.TTL, l.Deadline = ttl, driver.LocalDeadline(start, ttl)
	return nil
}

// Release is the second mistake: DEL frees the key whoever holds it. Its
// only check is that there was a key to delete.
func (r *redisDel) Release(ctx context.Context, l *aegis.Lease) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	n, err := r.c.Del(ctx, r.lockKey(l.Key)).Result()
	if err != nil {
		return fmt.Errorf("release %q: %w", l.Key, err)
	}
	if n == 0 {
		return fmt.Errorf("release %q: %w: the key is gone", l.Key, aegis.ErrLost)
	}
	return nil
}

// failOpenDial and failOpenIO bound failOpen's dials and replies, so that a Redis
// that is down or cut off turns into a grant within about a second, well
// inside the scheduler's claim timeout.
const (
	failOpenDial = 200 * time.Millisecond
	failOpenIO   = 500 * time.Millisecond
)

// openFailOpen opens failOpen on the first Redis address. It does not
// check that Redis answers: failing open is the point, from the start.
func openFailOpen(_ context.Context, _ *node) (aegis.Locker, func(), error) {
	addr, err := firstRedisAddr()
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(failOpenOptions(addr))
	f, err := newFailOpen(c, nil)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return f, func() { _ = f.Close(); _ = c.Close() }, nil
}

// failOpenOptions are failOpen's client options: bounded dials and
// replies, one dial per connection (go-redis's default is five, 100 ms
// apart), one retry of a command (so that one connection dropped by a
// Redis restart is not yet an outage).
func failOpenOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, DialTimeout: failOpenDial, DialerRetries: 1,
		ReadTimeout: failOpenIO, WriteTimeout: failOpenIO, MaxRetries: 1,
	}
}

// failOpenOwner marks the owner of a lease failOpen granted without
// Redis, so that its Renew and Release do not ask Redis either.
const failOpenOwner = "fail-open:"

// failOpen is redislease with the "keep running when Redis is down"
// choice, WRONG ON PURPOSE: when TryAcquire cannot reach Redis (a refused
// or reset connection, a timeout), it grants the key anyway, to every
// caller, with a token from this Locker's own counter, and says nothing.
// While Redis is down every node holds every key: the lock excludes
// nothing exactly when the servers are in trouble, and the tokens (each
// process counts from 1) mean nothing to a fence. The correct choice is
// fail closed, as redislease does: the call returns its error, the tick
// is not run (or waits for Redis), and availability is what is lost.
//
// Renew and Release of a lease granted that way succeed without a
// request; every other call, and every lease Redis granted, is
// redislease's (ErrHeld is still ErrHeld while Redis answers).
type failOpen struct {
	l *redislease.Locker
	// tokens counts this Locker's grants without Redis: a process-local
	// counter, which is what a fail-open path can offer.
	tokens atomic.Int64
}

func newFailOpen(c *redis.Client, cfg *redislease.Config) (*failOpen, error) {
	l, err := redislease.New(c, cfg)
	if err != nil {
		return nil, err
	}
	return &failOpen{l: l}, nil
}

// Close closes the wrapped redislease Locker.
func (f *failOpen) Close() error { return f.l.Close() }

func (f *failOpen) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	start := time.Now()
	l, err := f.l.TryAcquire(ctx, key, ttl)
	if err == nil || ctx.Err() != nil || !unreachable(err) {
		return l, err
	}
	// The mistake: Redis is unreachable, so grant.
	return &aegis.Lease{
		Key: key, Token: aegis.Token(f.tokens.Add(1)), Owner: failOpenOwner + owner.New(),
		TTL: ttl, Deadline: driver.LocalDeadline(start, ttl),
	}, nil
}

func (f *failOpen) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	if l != nil && strings.HasPrefix(l.Owner, failOpenOwner) {
		if err := driver.CheckTTL(ttl, 0); err != nil {
			return err
		}
		l.TTL, l.Deadline = ttl, driver.LocalDeadline(time.Now(), ttl)
		return nil
	}
	return f.l.Renew(ctx, l, ttl)
}

func (f *failOpen) Release(ctx context.Context, l *aegis.Lease) error {
	if l != nil && strings.HasPrefix(l.Owner, failOpenOwner) {
		return nil
	}
	return f.l.Release(ctx, l)
}

// unreachable reports whether err says Redis could not be reached (rather
// than answered): a network error (refused, reset, timed out), a
// connection closed under the call, or no connection to be had from the
// pool.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// The noBump lease table and statements. One row per key; a released row
// stays, with an empty owner, so that its token is kept for the next
// grant.
const (
	noBumpSchemaSQL = `CREATE TABLE IF NOT EXISTS aegis_lab_nobump (
	key        text PRIMARY KEY,
	token      bigint NOT NULL,
	owner      text NOT NULL,
	expires_at timestamptz NOT NULL
)`
	// noBumpSchemaLock serialises the CREATE of nodes starting together
	// (two concurrent CREATE TABLE IF NOT EXISTS can collide in
	// pg_type); the value is arbitrary.
	noBumpSchemaLock = `SELECT pg_advisory_xact_lock(7305693428713412771)`

	// The grant: a new row gets token 1; a released row (empty owner)
	// the next token; an EXPIRED row is taken over KEEPING ITS TOKEN. That
	// last branch is the bug: the correct reaper sets token = token + 1
	// there too, so the holder it replaced is fenced off.
	noBumpAcquireSQL = `INSERT INTO aegis_lab_nobump AS l (key, token, owner, expires_at)
VALUES ($1, 1, $2, now() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE
SET token = CASE WHEN l.owner = '' THEN l.token + 1 ELSE l.token END, -- the bug: no + 1 for an expired holder
    owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE l.owner = '' OR l.expires_at <= now() -- a live row is held
RETURNING token`
	// Renew and release compare the owner and token, and renew the
	// expiry too (database time): those are right.
	noBumpRenewSQL = `UPDATE aegis_lab_nobump SET expires_at = now() + $4 * interval '1 millisecond'
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > now()`
	noBumpReleaseSQL = `UPDATE aegis_lab_nobump SET owner = '', expires_at = now()
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > now()`
)

// openNoBump opens noBump on the store of record, which must be
// PostgreSQL.
func openNoBump(ctx context.Context, n *node) (aegis.Locker, func(), error) {
	if strings.HasPrefix(n.c.Store, "sqlite:") {
		return nil, nil, fmt.Errorf("%w: the no-bump lease table needs a PostgreSQL store, not SQLite", aegis.ErrInvalid)
	}
	cfg, err := pgxpool.ParseConfig(n.c.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("no-bump lease: the store's URL: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("no-bump lease: connect: %w", err)
	}
	nb, err := newNoBump(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return nb, pool.Close, nil
}

// noBump is a PostgreSQL lease row per key whose reaper does not bump the
// token, WRONG ON PURPOSE: when a lease has expired (its holder paused,
// crashed or cut off), the next TryAcquire takes the row over with the
// SAME token. The old holder, when it resumes, and the new one then write
// with equal tokens, and a fence that compares bare tokens (fence.Check:
// equal is the same holder writing again) accepts both. pglease, like the
// invoice export's reaper, gives every new grant, a takeover included, a greater
// token, so the old holder's late write is refused; fence.CheckLease,
// which records the owner beside the token, refuses the second owner of
// an equal token even here. Expiry is database time (now()); Renew and
// Release compare the owner and are right.
type noBump struct{ pool *pgxpool.Pool }

// newNoBump creates noBump's table if it is missing.
func newNoBump(ctx context.Context, pool *pgxpool.Pool) (*noBump, error) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, noBumpSchemaLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, noBumpSchemaSQL)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("no-bump lease: create its table: %w", err)
	}
	return &noBump{pool: pool}, nil
}

// millis is ttl in whole milliseconds, rounded up.
func millis(ttl time.Duration) int64 { return int64((ttl + time.Millisecond - 1) / time.Millisecond) }

func (b *noBump) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	id := owner.New()
	start := time.Now()
	var token int64
	err := b.pool.QueryRow(ctx, noBumpAcquireSQL, key, id, millis(ttl)).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, aegis.ErrHeld
	}
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	return &aegis.Lease{Key: key, Token: aegis.Token(token), Owner: id, TTL: ttl, Deadline: driver.LocalDeadline(start, ttl)}, nil
}

func (b *noBump) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return err
	}
	start := time.Now()
	tag, err := b.pool.Exec(ctx, noBumpRenewSQL, l.Key, l.Owner, int64(l.Token), millis(ttl))
	if err != nil {
		return fmt.Errorf("renew %q: %w", l.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew %q: %w: expired or taken over", l.Key, aegis.ErrLost)
	}
	l.TTL, l.Deadline = ttl, driver.LocalDeadline(start, ttl)
	return nil
}

func (b *noBump) Release(ctx context.Context, l *aegis.Lease) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	tag, err := b.pool.Exec(ctx, noBumpReleaseSQL, l.Key, l.Owner, int64(l.Token))
	if err != nil {
		return fmt.Errorf("release %q: %w", l.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("release %q: %w: expired or taken over", l.Key, aegis.ErrLost)
	}
	return nil
}
