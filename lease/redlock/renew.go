package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/redisscript"
)

// Renew extends lease on every node that still holds it; it succeeds when
// a majority did within the lease's validity. Otherwise it returns an
// error wrapping ErrLost when some node no longer holds the lease (work
// under it must stop; the error says what each node found), one wrapping
// ErrValidityExpired when the majority answered too late, and one
// wrapping ErrNoQuorum when nodes failed and none said the lease is lost.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return err
	}
	value, ok := redisscript.Value(lease)
	if !ok {
		return forged("renew", lease.Key)
	}
	lock := redisscript.LockFor(l.prefix, lease.Key)
	start := time.Now()
	rs := l.each(ctx, l.timeout(ttl), func(ctx context.Context, i int) (int64, error) {
		return result(l.script(ctx, i, redisscript.RenewCall(lock, value, int64(lease.Token), ttl), redisscript.Grant{}))
	})
	if err := l.settle(ctx, "renew", lock, lease.Key, rs); err != nil {
		return err
	}
	if err := l.valid("renew", lease.Key, start, ttl); err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = driver.LocalDeadline(start, ttl)
	return nil
}

// Release deletes lease on every node that still holds it. It succeeds
// when a majority did. Otherwise it returns an error wrapping ErrLost when
// some node no longer held the lease (what was deleted are this lease's
// own leftovers on a minority), and one wrapping ErrNoQuorum when nodes
// failed and none said so.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	value, ok := redisscript.Value(lease)
	if !ok {
		return forged("release", lease.Key)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: release %q: %w", lease.Key, err)
	}
	lock := redisscript.LockFor(l.prefix, lease.Key)
	rs := l.each(ctx, l.timeout(lease.TTL), func(ctx context.Context, i int) (int64, error) {
		return result(l.script(ctx, i, redisscript.ReleaseCall(lock, value, int64(lease.Token)), redisscript.Grant{}))
	})
	return l.settle(ctx, "release", lock, lease.Key, rs)
}

// result reads the reply of a renew or release call.
func result(cmd *redis.Cmd, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	out, err := redisscript.Result(cmd)
	return int64(out), err
}

// forged is the ErrLost of a lease whose Owner does not carry its token:
// it was altered, or made by another backend; no request is sent.
func forged(op, key string) error {
	return fmt.Errorf("redlock: %s %q: %w: the lease's owner does not match its token (an altered or foreign lease)", op, key, aegis.ErrLost)
}

// settle decides a renew or release from the nodes' replies (Done, or
// Gone and Taken: not held).
func (l *Locker) settle(ctx context.Context, op string, lock redisscript.Lock, key string, rs []reply) error {
	var yes, no int
	for _, r := range rs {
		switch {
		case r.err != nil:
		case redisscript.Outcome(r.v) == redisscript.Done:
			yes++
		default:
			no++
		}
	}
	return l.tally(ctx, op, lock, key, rs, yes, no)
}
