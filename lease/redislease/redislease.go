// Package redislease is an aegis.Locker on one Redis primary (or a Sentinel
// or Cluster deployment, through redis.UniversalClient), and the only Go
// Redis lock that issues a fencing token.
//
// # How
//
// A grant is one Lua script, one round trip: SET {prefix key} owner NX PX
// ttl, then INCR {prefix key}:fence, whose result is the token. Both keys
// share a hash slot (the {…} hash tag); the fence key has no TTL, so the
// token survives every release and expiry. Renew is a compare-and-PEXPIRE
// and Release a compare-and-DEL (which also PUBLISHes on
// {prefix key}:released), both comparing the grant's owner value (and
// restoring a lost counter, see below): a random
// 128-bit value from crypto/rand, unique to the grant, never logged nor put
// into an error. Lease.Owner is that value, ':' and the token; a lease
// whose token was changed is refused (ErrLost) without a request. Scripts
// run by SHA, with one EVAL when the server lacks them (after a restart or
// a failover). Expiry is the server's PX: no client clock decides it.
//
// Calls made at the same time through one Locker travel together: while
// two are in flight, the others queue and go as one pipeline (one write
// and one read on each side instead of one per call), sent by the first of
// their callers as soon as one of the two returns. Each call is still one
// round trip and each script atomic; a lone call goes at once, on its
// caller's goroutine. A caller whose context ends while its call is queued
// or in flight returns at once (or, if it was the one chosen to send the
// next pipeline, once that is sent), and a grant that lands after it left
// is released. A grant whose
// reply was lost and that go-redis sends again (MaxRetries) returns its
// own token rather than ErrHeld: the script recognizes its owner value. A
// lone call whose context ends mid-flight on a client with
// ContextTimeoutEnabled may still be granted by the server; that grant,
// which nobody holds, expires with its TTL, as with every Redis lock.
//
// [aegis.Acquire] waits through [Locker.Notify]: a release wakes waiters in
// about one round trip, and a holder's expiry wakes them just after it (a
// failed attempt learns the remaining TTL). All waiters of a Locker share
// one pub/sub connection, opened on the first wait and closed by
// [Locker.Close].
//
// # Guarantees
//
// On one Redis primary that does not fail over and does not lose its data:
// at most one live grant per key, and every grant's token is greater than
// every earlier grant's. A holder paused past its TTL still believes it
// holds; the fence (package fence) stops its writes.
//
// # What it does not guarantee
//
// Redis replication is asynchronous. A failover can promote a replica that
// never received the last grants: a second client is then granted the key
// while the first still holds it, and the counter goes back to the
// replica's value, so tokens repeat. TestFailoverLosesTheLease shows it with
// real servers: the replica is cut off after token 3, the lost primary
// grants 4, 5 and 6 (held), and the promoted replica grants token 4 again
// while the holder of 6 still runs. A fence that saw 6 then rejects the new,
// legitimate holder until its counter passes 6; one that saw only the lost
// 4 accepts both holders' writes, since a fence accepts a token equal to
// the last (one holder writes several times). A restart without
// persistence (no AOF with fsync) loses every lease and every counter:
// tokens start at 1 again.
//
// Config.WaitReplicas narrows the window: after the grant, WAIT n t; if
// fewer than n replicas acknowledge within t, the grant is released and
// TryAcquire returns an error wrapping [ErrNotReplicated] that says how
// many did. A failover to a replica that acknowledged keeps the lease (the
// second client gets ErrHeld) and the counter (the next token is greater,
// TestFailoverWithWaitKeepsTheLease). It does not close the window: WAIT
// is not a consensus (Sentinel or Cluster may still promote a replica that
// did not acknowledge), renewals are not waited for, and a replica with
// the key may expire it on its own clock.
//
// Use it to save duplicate work, or with a fence kept in a store that does
// not fail over with Redis; for correctness that must survive Redis
// failures, use a consensus store (etcd, ZooKeeper) or PostgreSQL.
//
// # Token counters and maxmemory-policy
//
// The counter {prefix key}:fence has no TTL and must never be lost: a
// counter that is gone makes the next grant's token 1 again, which a fence
// that saw a greater token refuses until the counter passes it (and which
// could repeat a token the fence has forgotten). The server must therefore
// never evict it: maxmemory-policy noeviction (Redis's default), or a
// volatile-* policy, which evicts only keys with a TTL. A volatile-*
// policy may evict a live lock under memory pressure, which ends that
// lease early like an expiry (the next grant still gets a greater token);
// noeviction makes grants fail with OOM instead. The allkeys-* policies
// evict counters: New asks for the policy (CONFIG GET, when the user may
// run it) and refuses them with an error wrapping aegis.ErrInvalid, unless
// Config.SkipPolicyCheck is set. It cannot check a user that may not run
// CONFIG GET, and does not see a later CONFIG SET, nor a failover to a
// server configured otherwise.
//
// What the backend detects: a counter deleted, evicted or set lower while
// a lease of its key is held is restored to that lease's token by the
// lease's next renew or its release (inside the same script), so the next
// grant's token is still greater. What it cannot detect: a counter lost
// while no lease of the key is held, or after the holder's last renewal
// when its lease then expires without a release; a counter lost together
// with the lock (FLUSHALL, a restart without persistence, a failover to a
// replica that missed the grants). A grant cannot tell a lost counter from
// a key never used, and tokens then restart at 1 (TestCounterRestored).
//
// # Least-privilege ACL
//
// A user that can do nothing but hold leases under the prefix "aegis:"
// (the rules of [ACLRules]):
//
//	ACL SETUSER app on >secret resetkeys ~{aegis:* resetchannels &{aegis:* -@all
//	    +evalsha +eval +set +get +incr +pttl +pexpire +del +publish
//	    +subscribe +unsubscribe +ping +wait
//
// Keys and channels are "{" + prefix + key + "}" and the same with
// ":fence" and ":released"; the commands are the scripts (and what they
// call), the wake-ups' pub/sub and its health check, and WAIT (a client
// with Options.ClientName also needs +client|setname). Without SCRIPT LOAD
// the first call of each script on a server sends EVAL, which caches it.
// Such a user may not run New's CONFIG GET: Redis records the refusal in
// ACL LOG, which Config.SkipPolicyCheck avoids (check the policy yourself).
//
// A missing permission is an error at the first call that needs it, at
// once, that names the command, keys or channel the call needed and
// carries the server's words: TryAcquire, Renew and Release for the
// scripts ("redislease: acquire "k": the Redis user lacks a permission:
// the user may not run SET; a grant runs EVALSHA or EVAL of a script
// calling SET, GET, INCR and PTTL on keys …"), Notify (and so
// aegis.Acquire) for SUBSCRIBE and the key's channel. A user without
// +subscribe can still wait, by polling, with Config.NoWakeups.
package redislease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/internal/redisnotify"
	"github.com/aegislab/aegis/internal/redisscript"
)

var (
	_ aegis.Locker   = (*Locker)(nil)
	_ aegis.Notifier = (*Locker)(nil)
)

// ErrNotReplicated is wrapped by TryAcquire's error when Config.WaitReplicas
// replicas did not acknowledge the grant within Config.WaitTimeout. The
// grant was released.
var ErrNotReplicated = errors.New("redislease: not enough replicas acknowledged the grant")

// linger is how long a key's wake-up subscription outlives its last waiter.
const linger = 2 * time.Second

// cleanupTimeout bounds the release of a grant that WAIT did not confirm.
const cleanupTimeout = 5 * time.Second

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Prefix is put before every key, inside the hash tag: key K is stored
	// as "{" + Prefix + K + "}". It may not hold '{', '}' or NUL, and is at
	// most 64 bytes. Default "aegis:".
	Prefix string
	// WaitReplicas, when positive, makes TryAcquire wait (WAIT) until that
	// many replicas acknowledge the grant, or release it and fail with
	// ErrNotReplicated. It needs a *redis.Client (standalone or Sentinel)
	// or a *redis.ClusterClient. Default 0: no wait.
	WaitReplicas int
	// WaitTimeout bounds that wait. Default 100ms; ignored when
	// WaitReplicas is 0.
	WaitTimeout time.Duration
	// SkipPolicyCheck makes New not ask the server for its
	// maxmemory-policy. Without it New refuses a policy that can evict the
	// token counters (allkeys-lru, allkeys-lfu, allkeys-random): an evicted
	// counter restarts the key's tokens at 1, so a fence then refuses every
	// new holder. Set it for a server whose policy you accept, or for a
	// user that may not run CONFIG GET (Redis records the refusal in ACL
	// LOG). Default false.
	SkipPolicyCheck bool
	// NoWakeups makes the Locker's waiters poll (aegis.Acquire's jittered
	// backoff) instead of subscribing to releases: for a Redis user without
	// +subscribe. Notify then returns a channel that never fires. Default
	// false: wake-ups, and a user without the permission gets an error that
	// says so.
	NoWakeups bool
}

// Locker is a Redis lease table. It is safe for concurrent use. Close it
// to stop its wake-up goroutine; the client stays the caller's.
type Locker struct {
	client       redis.UniversalClient
	prefix       string
	waitReplicas int
	waitTimeout  time.Duration
	noWakeups    bool
	co           *redisscript.Coalescer
	hub          *redisnotify.Hub
}

// New returns a Locker on client. A nil cfg means defaults. Bad
// configuration is an error wrapping aegis.ErrInvalid that names the field.
//
// New asks the server for its maxmemory-policy (one CONFIG GET, bounded by
// a second) and refuses a policy that can evict the token counters
// (allkeys-*) unless Config.SkipPolicyCheck is set. A server that does
// not answer, or a user that may not run CONFIG GET (the least-privilege
// user of ACLRules may not), is not checked, and New still succeeds: check
// the policy yourself then, and set SkipPolicyCheck to keep the refused
// CONFIG GET out of ACL LOG.
func New(client redis.UniversalClient, cfg *Config) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("redislease: %w: client is nil", aegis.ErrInvalid)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("redislease: %w: client is a nil %T", aegis.ErrInvalid, client)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = cmp.Or(c.Prefix, redisscript.DefaultPrefix)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, 100*time.Millisecond)
	if err := redisscript.CheckPrefix("Config.Prefix", c.Prefix); err != nil {
		return nil, fmt.Errorf("redislease: %w", err)
	}
	switch {
	case c.WaitReplicas < 0:
		return nil, fmt.Errorf("redislease: %w: Config.WaitReplicas %d is negative", aegis.ErrInvalid, c.WaitReplicas)
	case c.WaitTimeout < 0:
		return nil, fmt.Errorf("redislease: %w: Config.WaitTimeout %s is negative", aegis.ErrInvalid, c.WaitTimeout)
	}
	if c.WaitReplicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("redislease: %w: Config.WaitReplicas needs a *redis.Client or *redis.ClusterClient (WAIT must run on the connection of the grant), not %T", aegis.ErrInvalid, client)
		}
	}
	if !c.SkipPolicyCheck {
		ctx, cancel := context.WithTimeout(context.Background(), redisscript.CheckTimeout)
		err := redisscript.CheckEviction(ctx, client, "")
		cancel()
		if err != nil {
			return nil, fmt.Errorf("redislease: %w", err)
		}
	}
	return &Locker{
		client:       client,
		prefix:       c.Prefix,
		waitReplicas: c.WaitReplicas,
		waitTimeout:  c.WaitTimeout,
		noWakeups:    c.NoWakeups,
		co:           redisscript.NewCoalescer(client),
		hub: redisnotify.New(func() *redis.PubSub {
			return client.Subscribe(context.Background())
		}, linger),
	}, nil
}

// TryAcquire grants key for ttl unless another owner's lease is live
// (ErrHeld). One round trip (two with WaitReplicas). TTLs are rounded up to
// whole milliseconds.
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
	var (
		token int64
		left  time.Duration
		err   error
	)
	if l.waitReplicas > 0 {
		token, left, err = l.acquireReplicated(ctx, key, lock, id, ttl)
	} else {
		var cmd *redis.Cmd
		if cmd, err = l.co.Do(ctx, redisscript.AcquireCall(lock, id, ttl), redisscript.Grant{Lock: lock, Value: id}); err == nil {
			token, left, err = redisscript.AcquireReply(cmd)
		}
	}
	if err != nil {
		return nil, l.error("acquire", key, err)
	}
	if token == 0 {
		l.hub.Expires(lock.Channel(), left)
		return nil, aegis.ErrHeld
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(token),
		Owner:    redisscript.Owner(id, token),
		TTL:      ttl,
		Deadline: driver.LocalDeadline(start, ttl),
	}, nil
}

// acquireReplicated runs the grant and WAIT on one connection (WAIT counts
// the replicas that acknowledged that connection's last write).
func (l *Locker) acquireReplicated(ctx context.Context, key string, lock redisscript.Lock, id string, ttl time.Duration) (int64, time.Duration, error) {
	var client *redis.Client
	switch c := l.client.(type) {
	case *redis.Client:
		client = c
	case *redis.ClusterClient:
		var err error
		if client, err = c.MasterForKey(ctx, string(lock)); err != nil {
			return 0, 0, err
		}
	}
	conn := client.Conn()
	defer conn.Close()
	token, left, err := redisscript.Acquire(ctx, conn, lock, id, ttl)
	if err != nil || token == 0 {
		return token, left, err
	}
	acked, err := conn.Wait(ctx, l.waitReplicas, l.waitTimeout).Result()
	if err == nil && acked >= int64(l.waitReplicas) {
		return token, 0, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, rerr := redisscript.Release(rctx, conn, lock, id, 0)
	if err != nil {
		return 0, 0, errors.Join(fmt.Errorf("WAIT: %w", err), releaseErr(rerr))
	}
	return 0, 0, errors.Join(fmt.Errorf("WAIT: %d of %d replicas acknowledged within %s, so the grant was released: %w",
		acked, l.waitReplicas, l.waitTimeout, ErrNotReplicated), releaseErr(rerr))
}

func releaseErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("releasing the unreplicated grant: %w (it expires with its TTL)", err)
}

// Renew extends lease to ttl from now (server time) if it still holds its
// key; otherwise an error wrapping ErrLost that names the key and says
// whether another owner holds it or it is gone. One round trip. Renewals are not waited for, even
// with WaitReplicas.
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
	start := time.Now()
	cmd, err := l.co.Do(ctx, redisscript.RenewCall(redisscript.LockFor(l.prefix, lease.Key), value, int64(lease.Token), ttl), redisscript.Grant{})
	out := redisscript.Gone
	if err == nil {
		out, err = redisscript.Result(cmd)
	}
	if err != nil {
		return l.error("renew", lease.Key, err)
	}
	if out != redisscript.Done {
		return lost("renew", lease.Key, out)
	}
	lease.TTL = ttl
	lease.Deadline = driver.LocalDeadline(start, ttl)
	return nil
}

// Release frees lease's key if lease still holds it, and wakes the key's
// waiters; otherwise an error wrapping ErrLost as Renew's, changing
// nothing. One round trip.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	value, ok := redisscript.Value(lease)
	if !ok {
		return forged("release", lease.Key)
	}
	cmd, err := l.co.Do(ctx, redisscript.ReleaseCall(redisscript.LockFor(l.prefix, lease.Key), value, int64(lease.Token)), redisscript.Grant{})
	out := redisscript.Gone
	if err == nil {
		out, err = redisscript.Result(cmd)
	}
	if err != nil {
		return l.error("release", lease.Key, err)
	}
	if out != redisscript.Done {
		return lost("release", lease.Key, out)
	}
	return nil
}

// ACLRules returns the rules of a least-privilege Redis user for a Locker
// with prefix: only the prefix's keys and channels, only the commands it
// sends (New's CONFIG GET excepted: see Config.SkipPolicyCheck). Pass them
// to ACL SETUSER after the user's name, "on" and its password.
func ACLRules(prefix string) []string {
	return redisscript.ACLRules(cmp.Or(prefix, redisscript.DefaultPrefix))
}

// Notify implements aegis.Notifier: the channel receives a value when key
// is released through any Locker with the same prefix on the same Redis,
// or when a lease this Locker saw held expires. It returns once the
// server has confirmed the subscription; a refused subscription (a user
// without +subscribe, or without the key's channel) is an error that says
// so, as soon as the server answers. With Config.NoWakeups it returns a
// nil channel, which never fires: the waiter polls.
func (l *Locker) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, nil, err
	}
	if l.noWakeups {
		return nil, func() {}, nil
	}
	ch, stop, err := l.hub.Notify(ctx, redisscript.LockFor(l.prefix, key).Channel())
	if err != nil {
		return nil, nil, l.error("notify", key, err)
	}
	return ch, stop, nil
}

// Close closes the Locker's wake-up connection, waiting for its goroutine.
// It does not close the client, and does not release leases. Afterwards
// leases still work, but Notify fails, and so does aegis.Acquire.
func (l *Locker) Close() error {
	return l.hub.Close()
}

// error is the one place where the client's errors become this package's.
func (l *Locker) error(op, key string, err error) error {
	return fmt.Errorf("redislease: %w", redisscript.Translate(op, redisscript.LockFor(l.prefix, key), key, err))
}

// lost is the ErrLost of a renew or release that found the lease gone.
func lost(op, key string, out redisscript.Outcome) error {
	return fmt.Errorf("redislease: %s %q: %w: %s", op, key, aegis.ErrLost, out.Reason())
}

// forged is the ErrLost of a lease whose Owner does not carry its token:
// it was altered, or made by another backend; no request is sent.
func forged(op, key string) error {
	return fmt.Errorf("redislease: %s %q: %w: the lease's owner does not match its token (an altered or foreign lease)", op, key, aegis.ErrLost)
}
