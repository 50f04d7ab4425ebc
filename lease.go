package aegis

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/aegislab/aegis/driver"
)

// Token is a fencing token: for one key, every grant's token is greater than
// every earlier grant's. Tokens are issued by the store, never by the client.
type Token int64

// Lease is one grant of a key to one owner.
type Lease struct {
	Key   string
	Token Token
	// Owner is unique per grant (random). For Redis it is the secret that
	// release and renew compare, so it is never logged or put in an error.
	Owner string
	TTL   time.Duration
	// Deadline is local and conservative: the time, on this process's
	// monotonic clock, before which work under the lease must stop. It is the
	// moment the grant (or the last renewal) was requested plus TTL minus a
	// drift margin, so it passes before the store can expire the lease.
	Deadline time.Time
}

// A Lease never shows its Owner when printed: String (so %v, %+v and %s),
// GoString (%#v), LogValue (log/slog's text and JSON handlers) and MarshalJSON
// all leave it out, on a Lease and on a *Lease alike. For Redis the owner is
// the value that release and renew compare: whoever reads it can release or
// extend another worker's lease.

// String describes the lease without its owner.
func (l Lease) String() string {
	return fmt.Sprintf("lease %q token %d ttl %s", l.Key, l.Token, l.TTL)
}

// GoString is String, so %#v does not print the owner either.
func (l Lease) GoString() string { return l.String() }

// LogValue is the lease for log/slog: key, token, ttl and deadline, no owner.
func (l Lease) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("key", l.Key),
		slog.Int64("token", int64(l.Token)),
		slog.Duration("ttl", l.TTL),
		slog.Time("deadline", l.Deadline),
	)
}

// leaseJSON is a Lease's JSON form: every field but the owner.
type leaseJSON struct {
	Key      string        `json:"key"`
	Token    Token         `json:"token"`
	TTL      time.Duration `json:"ttl"`
	Deadline time.Time     `json:"deadline"`
}

// MarshalJSON encodes the lease without its owner, so a lease written to a
// log or an API response cannot be replayed to release it.
func (l Lease) MarshalJSON() ([]byte, error) {
	return json.Marshal(leaseJSON{Key: l.Key, Token: l.Token, TTL: l.TTL, Deadline: l.Deadline})
}

// Locker grants leases on keys. Implementations are safe for concurrent use.
//
// Every method validates its key and TTL with [driver.CheckKey] and [driver.CheckTTL] (or a
// backend's stricter rules) and returns an error naming what is wrong, never
// ErrHeld, for bad input. Errors of the underlying client are wrapped, so a
// caller can tell a lost lease (ErrLost) from an unreachable store.
type Locker interface {
	// TryAcquire makes one attempt; ErrHeld if another owner's lease is live.
	TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error)
	// Renew extends a lease this owner still holds to now+ttl (store time);
	// ErrLost if it expired or another owner took the key. On success it sets
	// l.TTL to ttl and moves l.Deadline forward.
	Renew(ctx context.Context, l *Lease, ttl time.Duration) error
	// Release frees the key only if l still holds it; ErrLost otherwise,
	// changing nothing.
	Release(ctx context.Context, l *Lease) error
}

// Notifier is implemented by a Locker that can tell a waiter when a key may
// have been freed (a Redis pub/sub message, a PostgreSQL NOTIFY, a channel).
// [Acquire] subscribes before each attempt, so a release between a failed
// attempt and the wait is not missed; it still polls with backoff, so a
// notification that never comes (an expiry) only costs latency.
type Notifier interface {
	// Notify returns a channel that receives a value when key may have
	// become free, and a function that ends the subscription. An error
	// (the subscription cannot be made) ends Acquire with that error. The
	// channel may be closed when a subscription that was made fails later;
	// Acquire then polls.
	Notify(ctx context.Context, key string) (<-chan struct{}, func(), error)
}

// Waiter is implemented by a Locker whose store queues waiters itself (the
// etcd and ZooKeeper recipes, where a waiter watches only its predecessor).
// [Acquire] calls it instead of retrying TryAcquire.
type Waiter interface {
	// Acquire blocks until the key is granted to this caller or ctx ends.
	Acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error)
}

// MaxKeyLen is the longest key, in bytes, that every backend accepts.
const MaxKeyLen = driver.MaxKeyLen

// MaxTTL is the longest TTL every backend accepts unless it documents more.
const MaxTTL = driver.MaxTTL

// CheckLease reports whether l can be passed to Renew or Release: non-nil,
// with a valid key and an owner.
func CheckLease(l *Lease) error {
	if l == nil {
		return fmt.Errorf("%w: lease is nil", ErrInvalid)
	}
	if err := driver.CheckKey(l.Key); err != nil {
		return err
	}
	if l.Owner == "" {
		return fmt.Errorf("%w: lease for %q has no owner", ErrInvalid, l.Key)
	}
	return nil
}
