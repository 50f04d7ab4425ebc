// Package rowlease is the lease logic that pglease and sqlitelease share:
// a key is a row of a lease table, granted, renewed and released by one
// statement each, which the database evaluates on its own clock. A backend
// supplies a Store that runs its statements; Locker does the rest
// (validation, owner ids, local deadlines, ErrHeld and ErrLost).
package rowlease

import (
	"context"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/owner"
)

// Store runs a lease table's three statements.
type Store interface {
	// Grant runs the granting statement for owner: the key's new token,
	// or ok false when another owner's lease on key is live.
	Grant(ctx context.Context, key, owner string, ttl time.Duration) (token int64, ok bool, err error)
	// Renew and Release run the statements that compare owner and token;
	// matched is false when no row did (the lease is lost).
	Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (matched bool, err error)
	Release(ctx context.Context, key, owner string, token int64) (matched bool, err error)
}

// Locker is an aegis.Locker over a Store. Name (the backend's package)
// prefixes its errors.
type Locker struct {
	Name  string
	Store Store
}

var _ aegis.Locker = Locker{}

// TryAcquire grants key for ttl unless another owner's lease is live
// (aegis.ErrHeld).
func (l Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := aegis.CheckKey(key); err != nil {
		return nil, err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	id := owner.New()
	start := time.Now()
	token, ok, err := l.Store.Grant(ctx, key, id, ttl)
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
		Deadline: aegis.LocalDeadline(start, ttl),
	}, nil
}

// Renew extends lease to now+ttl, database time, if it still holds its
// key; aegis.ErrLost otherwise.
func (l Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return err
	}
	start := time.Now()
	matched, err := l.Store.Renew(ctx, lease.Key, lease.Owner, int64(lease.Token), ttl)
	if err := l.result("renew", lease, matched, err); err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = aegis.LocalDeadline(start, ttl)
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
		return aegis.ErrLost
	}
	return nil
}
