package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/internal/redisscript"
)

// TryAcquire makes one Redlock attempt (see the package doc): ErrHeld when
// another owner holds the key on enough nodes to deny a majority, an error
// wrapping ErrNoQuorum when nodes failed (naming each node and its
// failure), an error wrapping ErrValidityExpired when a majority granted
// but too late. A failed attempt leaves nothing held. One parallel round
// trip, two when the nodes' counters disagree.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	lock := redisscript.LockFor(l.prefix, key)
	id := owner.New()
	start := time.Now()
	grants := l.each(ctx, l.timeout(ttl), func(ctx context.Context, i int) (int64, error) {
		cmd, err := l.script(ctx, i, redisscript.AcquireCall(lock, id, ttl), redisscript.Grant{Lock: lock, Value: id})
		if err != nil {
			return 0, err
		}
		token, _, err := redisscript.AcquireReply(cmd)
		return token, err
	})
	var (
		granted, held int
		token         int64
	)
	for _, g := range grants {
		switch {
		case g.err != nil:
		case g.v > 0:
			granted++
			token = max(token, g.v)
		default:
			held++
		}
	}
	err := l.tally(ctx, "acquire", lock, key, grants, granted, held)
	if err == nil {
		err = l.raise(ctx, key, ttl, lock, grants, token)
	}
	if err == nil {
		err = l.valid("acquire", key, start, ttl)
	}
	if err != nil {
		l.undo(ctx, ttl, lock, id, grants)
		return nil, err
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(token),
		Owner:    redisscript.Owner(id, token),
		TTL:      ttl,
		Deadline: driver.LocalDeadline(start, ttl),
	}, nil
}

// ErrValidityExpired is wrapped by the error of an attempt or renewal
// whose majority answered, but after the lease's validity (TTL − drift
// from the start of the call) had run out: the nodes are slow, or the TTL
// is too short for them.
var ErrValidityExpired = errors.New("redlock: the lease's validity ran out before a majority answered")

// valid fails a call started at start whose validity has run out.
func (l *Locker) valid(op, key string, start time.Time, ttl time.Duration) error {
	if elapsed := time.Since(start); elapsed >= ttl-driver.Drift(ttl) {
		return fmt.Errorf("redlock: %s %q: %w: a majority answered after %s, and a %s lease is valid for %s (the TTL less %s of drift)",
			op, key, ErrValidityExpired, elapsed.Round(time.Microsecond), ttl, ttl-driver.Drift(ttl), driver.Drift(ttl))
	}
	return nil
}

// raise brings every granting node whose counter is below token up to it,
// so that the next majority, which overlaps this one, counts past token.
func (l *Locker) raise(ctx context.Context, key string, ttl time.Duration, lock redisscript.Lock, grants []reply, token int64) error {
	lagging := make([]bool, len(grants))
	var any bool
	for i, g := range grants {
		if g.err == nil && g.v > 0 && g.v < token {
			lagging[i], any = true, true
		}
	}
	if !any {
		return nil
	}
	raised := l.eachOf(ctx, l.timeout(ttl), lagging, func(ctx context.Context, i int) (int64, error) {
		return redisscript.Raise(ctx, l.nodes[i], lock, token)
	})
	for i, r := range raised {
		if lagging[i] && (r.err != nil || r.v < token) {
			cause := r.err
			if cause == nil {
				cause = errors.New("its counter stayed below the token")
			} else {
				cause = redisscript.Translate("raise", lock, key, cause)
			}
			return fmt.Errorf("redlock: acquire %q: raising %s's counter to the token: %w: %w", key, l.name(i), ErrNoQuorum, cause)
		}
	}
	return nil
}

// undo deletes a failed attempt's grants on every node that may hold one
// (granted, or failed: its script may have run), even when ctx ended.
func (l *Locker) undo(ctx context.Context, ttl time.Duration, lock redisscript.Lock, id string, grants []reply) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	which := make([]bool, len(grants))
	for i, g := range grants {
		which[i] = g.err != nil || g.v > 0
	}
	l.eachOf(ctx, l.timeout(ttl), which, func(ctx context.Context, i int) (int64, error) {
		out, err := redisscript.Release(ctx, l.nodes[i], lock, id, 0)
		return int64(out), err
	})
}
