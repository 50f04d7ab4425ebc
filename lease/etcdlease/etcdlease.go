// Package etcdlease is an aegis.Locker on etcd: a lease per grant, a key per
// lease, and the lowest create revision holds.
//
// A lock on key K lives under the etcd prefix Config.Prefix + K' + "/", where
// K' is K escaped into one path segment (so "a" and "a/b" are separate
// locks). Each grant gets an etcd lease of its own and puts one key under the
// prefix, attached to that lease: Prefix + K' + "/" + the lease ID in hex,
// valued with the grant's owner. The key with the lowest create revision
// holds the lock; the others queue behind it, each watching only the key
// created just before its own. The fencing token is the holder key's create
// revision: etcd's revision is cluster-wide and only grows, so every grant's
// token is greater than every earlier grant's, for every key.
//
//   - TryAcquire grants a lease, then puts its key in one transaction that
//     succeeds only if no key exists under the prefix: it never waits and
//     leaves nothing behind when the lock is held (the lease is revoked).
//   - Acquire (aegis.Waiter) puts its key unconditionally, watches its
//     predecessor's deletion, keeps its own lease alive while it waits, and
//     re-checks that its key still exists before it reports success: a
//     campaign whose lease expired while it waited (a client cut off for
//     longer than the TTL) starts again at the back of the queue instead of
//     reporting a grant it no longer has.
//   - Renew checks in a transaction that the key still exists with the
//     lease's create revision and owner, then keeps its etcd lease alive. A
//     Renew with a TTL of another whole number of seconds moves the key to a
//     new etcd lease of that TTL in the same checked transaction (a put keeps
//     the key's create revision, so the token does not change) and revokes
//     the old one: that is how a shorter TTL (lockAtLeastFor) takes effect.
//   - Release deletes the key in a transaction that compares create revision
//     and owner, then revokes the etcd lease. A stale or forged lease gets
//     aegis.ErrLost and changes nothing.
//
// TTLs: etcd leases have whole seconds. A grant (TryAcquire, Acquire) takes
// a whole number of seconds and refuses any other TTL with aegis.ErrInvalid:
// a 500 ms or 1.5 s lease would silently live 1 or 2 s at the server. Renew
// takes any TTL and rounds it up to the next second at the server, because
// its callers hand it a remaining time (lockAtLeastFor, Held.ReleaseAfter)
// that is never whole, and keeping a lease up to a second longer than asked
// is what "at least" means; Lease.TTL and Lease.Deadline keep the TTL asked
// for, so the local deadline stays conservative. etcd raises a lease shorter than its minimum (1.5 election
// timeouts, rounded up: 2 s with etcd's default settings) without saying so;
// this package notices the raised TTL in the grant's answer, revokes the
// lease and returns an error wrapping aegis.ErrInvalid that names the
// cluster's minimum, and rejects shorter TTLs at once from then on.
// Config.MaxTTL bounds TTLs (24 h by default).
//
// Guarantees: with a quorum of members, at most one live grant per key, and
// strictly increasing tokens. A holder's lease expires TTL after its last
// renewal as the etcd leader counts it (a leader change only lengthens it);
// the local Deadline passes before that. What it does not guarantee: that a
// holder paused or cut off past its TTL has stopped working. Its renewal
// fails (aegis.Hold cancels its context at the deadline), but its writes
// must still go through the fence (package fence) with its token.
//
// A client that cannot reach a quorum cannot renew, so it loses its leases
// at their deadlines; a minority partition cannot grant anything. etcd's
// client waits for a connection until the context ends, so a call whose
// context has no deadline waits at most Config.RequestTimeout (5 s) for the
// cluster (Acquire: to take its place in the queue; once queued it waits
// through an outage until its context ends). The error then names the
// endpoints (host:port only) and why they did not answer.
//
// Session mode (Config.Session) is the other way etcd users lock: the keys
// of all grants hang on one etcd lease of the Locker, kept alive by the
// Locker every SessionTTL/3, and each grant's TTL is a timer of the Locker
// that deletes the grant's key (checked by its create revision) TTL after
// the grant or its last Renew. A grant's key is "<session lease id>-<slot>",
// the lowest slot no other grant or campaign of the Locker on that lock
// uses, so grants never share a key and a process locking one key again and
// again reuses one etcd key (a new key per grant would leave a deleted key
// per grant in etcd's index until compaction, which every read of the
// lock's first key walks). A grant is one transaction (put, and read the
// first key of the lock, as concurrency.Mutex does; a TryAcquire that finds
// the lock held deletes its key again), a release one delete, a Renew one
// read-only transaction. TTLs need not be whole seconds. Tokens are create
// revisions, as in per-grant mode. A lease's Deadline is the earlier of
// TTL − drift from the request and the session's etcd lease's last known
// expiry (at least 2/3 SessionTTL ahead while keep-alives succeed). What
// changes: a process that dies, or is paused or cut off past the TTL, keeps
// its keys until the session's etcd lease expires, SessionTTL after its
// last keep-alive (its holders' Deadlines still pass at TTL, and on resume
// the timer deletes the key and every call on the lease is ErrLost); when
// the session's etcd lease is gone, every grant on it is lost at once and
// the next grant starts a new session; a lease belongs to the Locker that
// granted it; and the Locker owns a goroutine and a timer per grant until
// Close, which revokes the session (freeing its keys).
package etcdlease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/owner"
)

var (
	_ aegis.Locker = (*Locker)(nil)
	_ aegis.Waiter = (*Locker)(nil)
)

// maxLeaseTTL is etcd's own limit on a lease's TTL (9,000,000,000 s).
const maxLeaseTTL = 9_000_000_000 * time.Second

// cleanupTimeout bounds a revoke that runs after the caller's context ended.
const cleanupTimeout = 5 * time.Second

// defaultRequestTimeout is Config.RequestTimeout's default.
const defaultRequestTimeout = 5 * time.Second

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Prefix is the etcd key prefix of every lock. Default "aegis/lease/".
	Prefix string
	// MaxTTL is the longest TTL accepted. Default aegis.MaxTTL (24 h); in
	// session mode, SessionTTL. At most etcd's own limit of 9,000,000,000 s.
	// In session mode a TTL longer than SessionTTL is accepted only when
	// MaxTTL is set above it: such a lease's Deadline follows the session's
	// etcd lease too (see Session).
	MaxTTL time.Duration
	// Session selects session mode: the keys of every grant hang on one
	// etcd lease of the Locker (its session), which the Locker keeps alive
	// every SessionTTL/3, and each grant's TTL is a timer of the Locker that
	// deletes the grant's key TTL after the grant or its last Renew. A grant
	// and a release are one transaction each (per-grant mode adds a lease
	// grant and a revoke), and TTLs need not be whole seconds. What it
	// costs: a process that dies, or is paused or cut off, keeps its keys
	// until the session's etcd lease expires, SessionTTL after its last
	// keep-alive, instead of TTL after its last renewal (its holders'
	// Deadlines still pass at TTL); a lease belongs to the Locker that
	// granted it (another Locker gets aegis.ErrLost); and the Locker owns a
	// goroutine and a timer per grant, so Close it. Default false: an etcd
	// lease per grant, and no goroutine.
	Session bool
	// SessionTTL is the TTL of the session's etcd lease, a whole number of
	// seconds at least the cluster's minimum lease TTL. Only with Session.
	// Default 60 s, concurrency.NewSession's default.
	SessionTTL time.Duration
	// RequestTimeout bounds every call (TryAcquire, Renew, Release, and
	// Acquire's taking a place in the queue) whose context has no
	// deadline; a context with a deadline decides alone. etcd's client
	// waits for a connection until the context ends, so without it a call
	// under context.Background() on an unreachable cluster would never
	// return. Default 5 s (etcdctl's command timeout): a healthy cluster
	// answers in milliseconds and elects a leader in about a second, and a
	// call that failed can be made again. Negative is invalid.
	RequestTimeout time.Duration
}

// Locker is an etcd lock table. It is safe for concurrent use. In
// per-grant mode (the default) it holds no goroutine or resource of its
// own; in session mode it owns its session's keep-alive goroutine and a
// timer per grant, which Close stops. Closing the client is the caller's.
type Locker struct {
	client *clientv3.Client
	prefix string
	maxTTL time.Duration
	// requestTimeout is Config.RequestTimeout.
	requestTimeout time.Duration
	// minSecs is the cluster's minimum lease TTL in seconds once a grant
	// showed it (0 before).
	minSecs atomic.Int64

	// Session mode only.
	session     bool
	sessionSecs int64
	grantMu     sync.Mutex // one session grant at a time
	stop        chan struct{}
	wg          sync.WaitGroup
	mu          sync.Mutex
	closed      bool
	sess        *session           // nil: none yet, or the last one was lost
	records     map[string]*record // by key path
}

// New returns a Locker on client. A nil cfg means defaults.
func New(client *clientv3.Client, cfg *Config) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcdlease: client is nil", aegis.ErrInvalid)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = cmp.Or(c.Prefix, "aegis/lease/")
	if c.RequestTimeout < 0 {
		return nil, fmt.Errorf("%w: etcdlease: Config.RequestTimeout %s is negative", aegis.ErrInvalid, c.RequestTimeout)
	}
	c.RequestTimeout = cmp.Or(c.RequestTimeout, defaultRequestTimeout)
	if c.Session {
		return newSession(client, c)
	}
	if c.SessionTTL != 0 {
		return nil, fmt.Errorf("%w: etcdlease: Config.SessionTTL %s is set but Config.Session is false: set Session to use a session", aegis.ErrInvalid, c.SessionTTL)
	}
	c.MaxTTL = cmp.Or(c.MaxTTL, aegis.MaxTTL)
	switch {
	case c.MaxTTL < time.Second:
		return nil, fmt.Errorf("%w: etcdlease: Config.MaxTTL %s is shorter than 1s: etcd leases are whole seconds", aegis.ErrInvalid, c.MaxTTL)
	case c.MaxTTL > maxLeaseTTL:
		return nil, fmt.Errorf("%w: etcdlease: Config.MaxTTL %s is longer than etcd's limit of %d s", aegis.ErrInvalid, c.MaxTTL, int64(maxLeaseTTL/time.Second))
	}
	return &Locker{client: client, prefix: c.Prefix, maxTTL: c.MaxTTL, requestTimeout: c.RequestTimeout}, nil
}

// newSession is New in session mode; c has its Prefix.
func newSession(client *clientv3.Client, c Config) (*Locker, error) {
	c.SessionTTL = cmp.Or(c.SessionTTL, 60*time.Second)
	switch {
	case c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0:
		return nil, fmt.Errorf("%w: etcdlease: Config.SessionTTL %s is not a positive whole number of seconds: etcd leases are whole seconds", aegis.ErrInvalid, c.SessionTTL)
	case c.SessionTTL > maxLeaseTTL:
		return nil, fmt.Errorf("%w: etcdlease: Config.SessionTTL %s is longer than etcd's limit of %d s", aegis.ErrInvalid, c.SessionTTL, int64(maxLeaseTTL/time.Second))
	}
	c.MaxTTL = cmp.Or(c.MaxTTL, c.SessionTTL)
	if err := driver.CheckTTL(c.MaxTTL, maxLeaseTTL); err != nil {
		return nil, fmt.Errorf("etcdlease: Config.MaxTTL: %w", err)
	}
	return &Locker{
		client:         client,
		prefix:         c.Prefix,
		maxTTL:         c.MaxTTL,
		requestTimeout: c.RequestTimeout,
		session:        true,
		sessionSecs:    int64(c.SessionTTL / time.Second),
		stop:           make(chan struct{}),
		records:        map[string]*record{},
	}, nil
}

// grant is what a lease's Owner names: the lock's prefix and the key of
// this grant under it.
type grant struct {
	owner  string
	prefix string // every key of the lock: Prefix + segment + "/"
	path   string // this grant's key
}

// newGrant names a grant on key for the etcd lease id.
func (l *Locker) newGrant(key string, id clientv3.LeaseID) grant {
	prefix := l.prefix + keypath.Segment(key) + "/"
	hexID := fmt.Sprintf("%016x", uint64(id))
	return grant{owner: hexID + "." + owner.New(), prefix: prefix, path: prefix + hexID}
}

// grantOf parses a lease's owner ("<lease id hex>.<random hex>"). An owner
// this package cannot have made names no grant: the lease is lost.
func (l *Locker) grantOf(lease *aegis.Lease) (grant, bool) {
	hexID, random, ok := strings.Cut(lease.Owner, ".")
	if !ok || len(hexID) != 16 || len(random) != 32 {
		return grant{}, false
	}
	if _, err := strconv.ParseUint(hexID, 16, 64); err != nil {
		return grant{}, false
	}
	prefix := l.prefix + keypath.Segment(lease.Key) + "/"
	return grant{owner: lease.Owner, prefix: prefix, path: prefix + hexID}, true
}

// wholeSeconds is seconds for a grant: ttl must be a whole number of
// seconds.
func (l *Locker) wholeSeconds(ttl time.Duration) (int64, error) {
	if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
		return 0, err
	}
	if ttl%time.Second != 0 {
		return 0, fmt.Errorf("%w: ttl %s is not a whole number of seconds: etcd leases are whole seconds", aegis.ErrInvalid, ttl)
	}
	return l.seconds(ttl)
}

// seconds validates ttl and returns it in whole seconds, rounded up.
func (l *Locker) seconds(ttl time.Duration) (int64, error) {
	if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
		return 0, err
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	if min := l.minSecs.Load(); secs < min {
		return 0, errBelowMinimum(ttl, min)
	}
	return secs, nil
}

func errBelowMinimum(ttl time.Duration, min int64) error {
	return fmt.Errorf("%w: ttl %s is below this etcd cluster's minimum lease TTL of %d s (1.5 × its election timeout, rounded up)", aegis.ErrInvalid, ttl, min)
}

// held is the comparison that says g's key still exists as token and
// owner made it.
func held(g grant, token aegis.Token) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(g.path), "=", int64(token)),
		clientv3.Compare(clientv3.Value(g.path), "=", g.owner),
	}
}

// TryAcquire grants key for ttl unless a key exists under the lock's prefix
// (ErrHeld: a holder, or waiters queued behind one). It never waits. Two
// round trips (grant, transaction), three when the key is held (the unused
// etcd lease is revoked). When ctx has no deadline it waits at most
// Config.RequestTimeout for the cluster. A cluster that does not answer is
// an error that names its endpoints, never ErrHeld.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if l.session {
		if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("etcdlease: acquire %q: %w", key, err)
		}
		ctx, cancel := l.bound(ctx)
		defer cancel()
		return l.sessionTryAcquire(ctx, key, ttl)
	}
	secs, err := l.wholeSeconds(ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdlease: acquire %q: %w", key, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	start := time.Now()
	id, err := l.grantLease(ctx, key, ttl, secs)
	if err != nil {
		return nil, err
	}
	g := l.newGrant(key, id)
	resp, err := l.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.prefix), "=", 0).WithPrefix()). // no holder, no waiter
		Then(clientv3.OpPut(g.path, g.owner, clientv3.WithLease(id))).
		Commit()
	if err != nil || !resp.Succeeded {
		l.revoke(ctx, id) // also deletes the key if a cancelled put landed
		if err != nil {
			return nil, l.fail(ctx, "acquire", key, err)
		}
		return nil, aegis.ErrHeld
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(resp.Header.Revision), // the put's revision: the key's create revision
		Owner:    g.owner,
		TTL:      ttl,
		Deadline: driver.LocalDeadline(start, ttl),
	}, nil
}

// grantLease grants an etcd lease of secs seconds and checks that the
// cluster did not raise it to its minimum.
func (l *Locker) grantLease(ctx context.Context, key string, ttl time.Duration, secs int64) (clientv3.LeaseID, error) {
	resp, err := l.client.Grant(ctx, secs)
	if err != nil {
		return 0, l.fail(ctx, "grant lease for", key, err)
	}
	if resp.TTL > secs {
		l.minSecs.Store(resp.TTL)
		l.revoke(ctx, resp.ID)
		return 0, errBelowMinimum(ttl, resp.TTL)
	}
	return resp.ID, nil
}

// Renew checks that lease still holds its key and keeps it alive for ttl
// from now; ErrLost otherwise. With a TTL of the same whole number of
// seconds: two round trips (a read-only transaction, a keep-alive). With
// another one: three (grant, a checked transaction that moves the key to the
// new etcd lease, revoke of the old one). When ctx has no deadline it waits
// at most Config.RequestTimeout for the cluster. A cluster that does not
// answer is an error naming its endpoints, not ErrLost: the lease may still
// be live until its Deadline.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if l.session {
		if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("etcdlease: renew %q: %w", lease.Key, err)
		}
		ctx, cancel := l.bound(ctx)
		defer cancel()
		return l.sessionRenew(ctx, lease, ttl)
	}
	secs, err := l.seconds(ttl)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdlease: renew %q: %w", lease.Key, err)
	}
	g, ok := l.grantOf(lease)
	if !ok {
		return lost("renew", lease.Key, reasonForged)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	start := time.Now()
	if secs == int64((lease.TTL+time.Second-1)/time.Second) {
		err = l.keepAlive(ctx, g, lease)
	} else {
		err = l.moveLease(ctx, g, lease, ttl, secs)
	}
	if err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = driver.LocalDeadline(start, ttl)
	return nil
}

// keepAlive checks g's key, then refreshes the etcd lease it is attached
// to. Checking first means a forged lease refreshes nothing; a lease that
// expires between the two steps fails the keep-alive.
func (l *Locker) keepAlive(ctx context.Context, g grant, lease *aegis.Lease) error {
	var resp *clientv3.TxnResponse
	err := retryRead(ctx, func() (err error) {
		resp, err = l.client.Txn(ctx).If(held(g, lease.Token)...).Then(clientv3.OpGet(g.path)).Commit()
		return err
	})
	if err != nil {
		return l.fail(ctx, "renew", lease.Key, err)
	}
	// A failed comparison runs no Then op: Responses is empty.
	if !resp.Succeeded || len(resp.Responses) == 0 {
		return lost("renew", lease.Key, reasonGone)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return lost("renew", lease.Key, reasonGone)
	}
	var ka *clientv3.LeaseKeepAliveResponse
	err = retryRead(ctx, func() (err error) {
		ka, err = l.client.KeepAliveOnce(ctx, clientv3.LeaseID(kvs[0].Lease))
		return err
	})
	if err != nil {
		return l.fail(ctx, "renew", lease.Key, err)
	}
	if ka.TTL <= 0 {
		return lost("renew", lease.Key, reasonExpired)
	}
	return nil
}

// moveLease attaches g's key to a new etcd lease of secs seconds, if the
// key is still lease's, and revokes the old etcd lease.
func (l *Locker) moveLease(ctx context.Context, g grant, lease *aegis.Lease, ttl time.Duration, secs int64) error {
	id, err := l.grantLease(ctx, lease.Key, ttl, secs)
	if err != nil {
		return err
	}
	resp, err := l.client.Txn(ctx).If(held(g, lease.Token)...).
		Then(clientv3.OpGet(g.path), clientv3.OpPut(g.path, g.owner, clientv3.WithLease(id))).
		Commit()
	if err != nil || !resp.Succeeded {
		// A cancelled put that landed moved the key to id: revoking id
		// deletes it, which is the lease lost, never a second holder.
		l.revoke(ctx, id)
		if err != nil {
			return l.fail(ctx, "renew", lease.Key, err)
		}
		return lost("renew", lease.Key, reasonGone)
	}
	// Succeeded: both Then ops ran, so Responses has their two answers; the
	// first, the get before the put, names the old etcd lease.
	if len(resp.Responses) > 0 {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			l.revoke(ctx, clientv3.LeaseID(kvs[0].Lease)) // no key is attached to it any more
		}
	}
	return nil
}

// Release deletes lease's key if lease still holds it, then revokes its
// etcd lease; ErrLost otherwise, changing nothing. Two round trips. When
// ctx has no deadline it waits at most Config.RequestTimeout for the
// cluster; a cluster that does not answer is an error naming its endpoints
// (the key then expires with its etcd lease).
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdlease: release %q: %w", lease.Key, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if l.session {
		return l.sessionRelease(ctx, lease)
	}
	g, ok := l.grantOf(lease)
	if !ok {
		return lost("release", lease.Key, reasonForged)
	}
	resp, err := l.client.Txn(ctx).If(held(g, lease.Token)...).
		Then(clientv3.OpDelete(g.path, clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		return l.fail(ctx, "release", lease.Key, err)
	}
	if !resp.Succeeded || len(resp.Responses) == 0 {
		return lost("release", lease.Key, reasonGone)
	}
	// The key is gone: the lock is free. The etcd lease has no key left; a
	// revoke that fails leaves it to expire, harmlessly.
	if prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs(); len(prev) > 0 {
		l.revoke(ctx, clientv3.LeaseID(prev[0].Lease))
	}
	return nil
}

// retryRead runs a read-only request until it gets an answer or ctx ends.
// etcd's client does not retry transactions, even read-only ones, when a
// member answers Unavailable ("leader changed", "no leader", a member going
// away); a read is safe to send again, and a leader election takes about an
// election timeout.
func retryRead(ctx context.Context, read func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := read()
		if !unavailable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// unavailable reports whether err says a member could not serve the
// request for now; the client hands these over as an rpctypes.EtcdError.
func unavailable(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}

// revoke revokes an etcd lease, deleting the keys attached to it, even when
// ctx has ended. Errors are dropped: an unrevoked lease expires by itself.
func (l *Locker) revoke(ctx context.Context, id clientv3.LeaseID) {
	if id == clientv3.NoLease {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, _ = l.client.Revoke(ctx, id)
}

// Why a lease is lost, as the error says it.
const (
	reasonGone    = "key deleted or taken (released, expired with its etcd lease, or granted to another owner)"
	reasonExpired = "etcd lease expired"
	reasonForged  = "owner names no grant of this package"
	// Session mode.
	reasonSessionLost = "the session's etcd lease expired, and every key on it went with it"
	reasonTTL         = "ttl passed without renewal"
	reasonUnknown     = "not held through this Locker (released, expired, granted by another Locker, or forged)"
)

// lost is aegis.ErrLost for op on key, saying why.
func lost(op, key, reason string) error {
	return fmt.Errorf("etcdlease: %s %q: %s: %w", op, key, reason, aegis.ErrLost)
}

// fail translates a client error: a missing etcd lease is a lost lease;
// anything else (an unreachable cluster, a cancelled context) is wrapped.
// When the cluster did not answer in time, the error names the endpoints
// that cannot be dialled and why (the client itself only says "context
// deadline exceeded"), and when ctx was ended by the call's own bound, says
// so.
func (l *Locker) fail(ctx context.Context, op, key string, err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return lost(op, key, reasonExpired)
	}
	if errors.Is(err, context.DeadlineExceeded) || unavailable(err) {
		var na noAnswer
		if ctx.Err() != nil && errors.As(context.Cause(ctx), &na) {
			return fmt.Errorf("etcdlease: %s %q: %s: %s: %w", op, key, na, l.unreachable(), err)
		}
		if why := dialProblems(l.client.Endpoints()); why != "" {
			return fmt.Errorf("etcdlease: %s %q: %s: %w", op, key, why, err)
		}
	}
	return fmt.Errorf("etcdlease: %s %q: %w", op, key, err)
}
