// Package rowlease is the lease logic that pglease and sqlitelease share:
// a key is a row of a lease table, granted, renewed and released by one
// statement each, which the database evaluates on its own clock. A backend
// supplies a Store that runs its statements; Locker does the rest
// (validation, owner ids, local deadlines, ErrHeld and ErrLost, and the
// waiting of Acquire).
//
// Waiting is fair: a caller of Acquire that finds the key held enters the
// key's queue, a table of waiters (one row per waiter, with the time it
// started waiting and an expiry it refreshes while it waits). A grant to an
// owner is refused while a live waiter that started waiting earlier is
// queued, so a holder that releases and at once asks again goes behind the
// waiters instead of winning every race against them. A waiter that crashes
// blocks nobody for longer than QueueTTL. The lease row carries a hint, the
// latest expiry of any queue entry of its key: TryAcquire is refused while
// it is live and otherwise reads nothing but its own row; only a queued
// waiter's grant reads the queue, to keep its order.
package rowlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/owner"
)

// Store runs a lease table's statements.
type Store interface {
	// Grant runs the granting statement for owner: the key's new token,
	// or ok false when another owner's lease on key is live or an earlier
	// waiter is queued for it. queued tells that owner has a queue entry,
	// which a grant removes in the same transaction.
	Grant(ctx context.Context, key, owner string, ttl time.Duration, queued bool) (token int64, ok bool, err error)
	// Renew and Release run the statements that compare owner and token;
	// matched is false when no row did (the lease is lost).
	Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (matched bool, err error)
	Release(ctx context.Context, key, owner string, token int64) (matched bool, err error)
	// Enqueue enters owner in key's queue until ttl from now (store time),
	// keeping the time it first entered, and drops the entries of other
	// waiters that expired.
	Enqueue(ctx context.Context, key, owner string, ttl time.Duration) error
	// Dequeue removes owner's entry from key's queue (a waiter that gave
	// up) and wakes the other waiters.
	Dequeue(ctx context.Context, key, owner string) error
}

// QueueTTL is how long a queue entry lives without a refresh: the longest
// a crashed waiter keeps a free key from everyone else.
const QueueTTL = time.Second

// refresh is how often a waiter renews its queue entry.
const refresh = QueueTTL / 4

// cleanupTimeout bounds the removal of a queue entry after Acquire ends.
const cleanupTimeout = 5 * time.Second

// Locker is an aegis.Locker and aegis.Waiter over a Store. Name (the
// backend's package) prefixes its errors.
type Locker struct {
	Name  string
	Store Store
	// Notify, when set, subscribes to the wake-ups of key (a release while
	// waiters are queued); an error ends Acquire. Without it, or once a
	// subscription's channel is closed, waiters poll.
	Notify func(ctx context.Context, key string) (<-chan struct{}, func(), error)
	// Poll spaces a waiter's attempts. The zero value polls every 5ms to
	// 100ms.
	Poll backoff.Backoff
}

var (
	_ aegis.Locker = Locker{}
	_ aegis.Waiter = Locker{}
)

// TryAcquire grants key for ttl unless another owner's lease is live or a
// waiter is queued for the key (aegis.ErrHeld).
func (l Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := check(key, ttl); err != nil {
		return nil, err
	}
	return l.grant(ctx, key, owner.New(), ttl, false)
}

func check(key string, ttl time.Duration) error {
	if err := driver.CheckKey(key); err != nil {
		return err
	}
	return driver.CheckTTL(ttl, 0)
}

func (l Locker) grant(ctx context.Context, key, id string, ttl time.Duration, queued bool) (*aegis.Lease, error) {
	start := time.Now()
	token, ok, err := l.Store.Grant(ctx, key, id, ttl, queued)
	if err != nil {
		return nil, fmt.Errorf("%s: acquire %q: %w", l.Name, key, err)
	}
	if !ok {
		return nil, aegis.ErrHeld
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(token),
		Owner:    id,
		TTL:      ttl,
		Deadline: driver.LocalDeadline(start, ttl),
	}, nil
}

// Acquire blocks until key is granted for ttl or ctx ends, waiting in the
// key's queue (see the package doc). It returns at once on any error other
// than aegis.ErrHeld; when ctx ends, an error wrapping ctx.Err(). A waiter
// that gives up leaves the queue.
func (l Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := check(key, ttl); err != nil {
		return nil, err
	}
	// One owner id for the whole wait: the queue entry is the owner's.
	id := owner.New()
	lease, err := l.grant(ctx, key, id, ttl, false)
	if !errors.Is(err, aegis.ErrHeld) {
		return lease, err
	}
	var wake <-chan struct{}
	if l.Notify != nil {
		// Subscribe before entering the queue: a release that sees the
		// entry notifies, and the subscription is there to hear it. One
		// that cannot be made is an error (as in aegis.Acquire), never a
		// silent fall back to polling.
		ch, stop, err := l.Notify(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("%s: acquire %q: wait for release: %w", l.Name, key, err)
		}
		defer stop()
		wake = ch
	}
	queued := false
	defer func() {
		if queued && lease == nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			// Best effort: an entry left behind expires within QueueTTL.
			_ = l.Store.Dequeue(ctx, key, id)
		}
	}()
	poll := l.Poll
	if poll.Max == 0 {
		poll = backoff.Backoff{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	var refreshed time.Time
	for attempt := 0; ; attempt++ {
		if time.Since(refreshed) >= refresh {
			// Marked before the call: an Enqueue cut short by ctx may still
			// have committed, and removing no entry is harmless.
			queued, refreshed = true, time.Now()
			if err := l.Store.Enqueue(ctx, key, id, QueueTTL); err != nil {
				return nil, fmt.Errorf("%s: acquire %q: wait in the queue: %w", l.Name, key, err)
			}
		}
		lease, err = l.grant(ctx, key, id, ttl, true)
		if !errors.Is(err, aegis.ErrHeld) {
			return lease, err
		}
		woken, err := backoff.Wait(ctx, wake, poll.Delay(attempt))
		if err != nil {
			return nil, fmt.Errorf("%s: acquire %q: %w", l.Name, key, err)
		}
		if woken {
			attempt = -1 // the key was just freed: start the schedule again
		}
	}
}

// Renew extends lease to now+ttl, database time, if it still holds its
// key; aegis.ErrLost otherwise.
func (l Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return err
	}
	start := time.Now()
	matched, err := l.Store.Renew(ctx, lease.Key, lease.Owner, int64(lease.Token), ttl)
	if err := l.result("renew", lease, matched, err); err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = driver.LocalDeadline(start, ttl)
	return nil
}

// Release frees lease's key if lease still holds it; aegis.ErrLost
// otherwise, changing nothing.
func (l Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	matched, err := l.Store.Release(ctx, lease.Key, lease.Owner, int64(lease.Token))
	return l.result("release", lease, matched, err)
}

func (l Locker) result(op string, lease *aegis.Lease, matched bool, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %s %q: %w", l.Name, op, lease.Key, err)
	}
	if !matched {
		// One statement cannot tell which of these it was; each means the
		// same to the caller: stop.
		return fmt.Errorf("%s: %s %q: %w: released, expired or granted to another owner since", l.Name, op, lease.Key, aegis.ErrLost)
	}
	return nil
}
