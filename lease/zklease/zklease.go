// Package zklease is an aegis.Locker on ZooKeeper: the lock recipe of
// ephemeral sequential nodes, with a TTL kept by the Locker and the session
// checked on every call.
//
// A lock on key K is the container node Config.Root + "/" + K', where K' is
// K escaped into one node name (so "a" and "a/b" are separate locks). Each
// grant creates an ephemeral sequential child named after its owner,
// "<random>-<sequence>"; the child with the lowest sequence holds the lock
// and the others queue behind it, each watching only the child just before
// its own (no herd effect). The fencing token is the holder node's czxid,
// the zxid of the transaction that created it: ZooKeeper orders every
// transaction of the ensemble, so every grant's token is greater than every
// earlier grant's.
//
// The lease and the session. An ephemeral node lives as long as the session
// that created it, and a session lives as long as the ensemble hears from
// the client within the session timeout. So:
//
//   - The Locker deletes the node itself TTL after the last grant or Renew
//     (a timer per lease, checked by the node's version), so an unrenewed
//     lease ends after its TTL like on every backend, and a Renew with a
//     shorter TTL (lockAtLeastFor) makes the node go about that TTL from
//     now. If the process dies or is cut off first, the session timeout
//     bounds the lease instead: the key is free one session timeout after
//     the ensemble last heard from the process.
//   - The local Deadline follows both: min(start + TTL, start + session
//     timeout) − drift, where start is when the grant's or Renew's request
//     was sent. The ensemble answered that request, so the session lives at
//     least one session timeout after it was sent, and the timer deletes the
//     node no sooner than TTL after it. By default a TTL may not exceed
//     the session timeout (aegis.ErrInvalid), so the deadline is start +
//     TTL − drift as on every backend. With Config.MaxTTL raised, a TTL may
//     be longer (ShedLock's lockAtMostFor of 30 minutes on an ensemble
//     whose maxSessionTimeout is 40 s): the key stays held for the TTL
//     while the holder's session lives, and the holder keeps trusting it
//     as long as it renews within each session timeout. aegis.Hold renews
//     every TTL/3 and computes its own deadline from the TTL after each
//     renewal, which is why that is not the default. See docs/decisions.md.
//   - Renew is a write the leader orders (a multi holding one version
//     check), not a read a lagging server may answer, and it fails with
//     aegis.ErrLost when the connection's session is not the one that
//     created the node: a client that reconnected on a new session after an
//     expiry never silently continues as if it still held the lock.
//   - While disconnected (Curator's SUSPENDED) a Renew waits for the
//     connection to come back, on the same session, until its context ends;
//     aegis.Hold gives it the lease's deadline, so Held.Context() is
//     cancelled once the remaining session time cannot be trusted, at most
//     one TTL after the last renewal. A failover that reconnects the client
//     to another server within the TTL keeps the lease. On expiry (LOST)
//     every call fails with ErrLost at once.
//
// A lease belongs to the Locker (and session) that granted it: another
// Locker, even on the same connection, cannot renew or release it and gets
// ErrLost.
//
// Guarantees: with a quorum, at most one live grant per key and strictly
// increasing tokens. Not guaranteed: that a holder paused past its session
// timeout has stopped working (its session expires and another client is
// granted the key); its writes must go through the fence (package fence)
// with its token. One corner is narrower than the session timeout: if the
// server the client talks to is cut off from the leader within half a tick
// after a renewal, and the client is cut off too, the leader may expire the
// session up to a third of the session timeout earlier than the local
// deadline assumes. The fence covers it.
//
// Needs ZooKeeper 3.5.3 or later (container nodes).
package zklease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/keypath"
)

var (
	_ aegis.Locker = (*Locker)(nil)
	_ aegis.Waiter = (*Locker)(nil)
)

var errClosed = errors.New("zklease: locker closed")

// Config configures a Locker. Connect returns one filled in; with a
// connection made by zk.Connect a nil Config means defaults.
type Config struct {
	// Events is the session event channel zk.Connect returned with the
	// connection. The Locker reads it (so nothing else may) until it is
	// closed or the Locker is: waits wake at once at a session event.
	// Default nil: the Locker polls the connection's State and SessionID
	// every 20 ms instead. Not needed with a Config from Connect.
	Events <-chan zk.Event
	// SessionTimeout is the session timeout the ensemble granted: the one
	// asked for, clamped to the servers' [minSessionTimeout,
	// maxSessionTimeout] (by default 2 and 20 ticks). It bounds the local
	// Deadline of every grant and renewal. It must not exceed what the
	// servers grant, or the local deadline can pass after the session
	// expired; Connect reads the granted value from the wire and needs no
	// guess. Default 0: at the first call the Locker reads its session's
	// timeout from the list of sessions of the server it is connected to
	// (the four-letter word cons). A server that will not answer cons (it
	// is not in 4lw.commands.whitelist by default) is asked for its
	// minSessionTimeout instead (a handshake of its own), which no session
	// of the ensemble can undercut when its members share it; a TTL above
	// it is then refused with an error that says so and what to do.
	SessionTimeout time.Duration
	// MaxTTL is the longest TTL accepted. Default 0: the session timeout,
	// because aegis.Hold trusts a lease for TTL after each renewal while the
	// session may expire one session timeout after the ensemble last heard
	// from the client. Raise it to take longer TTLs: their local Deadline
	// follows the session, min(start + TTL, start + session timeout) −
	// drift, so the caller must renew within each session timeout to keep
	// trusting the lease.
	MaxTTL time.Duration
	// Root is the node under which every lock lives, created when missing.
	// Default "/aegis/lease".
	Root string
	// ACL is the ACL of the nodes the Locker creates. Default
	// zk.WorldACL(zk.PermAll).
	ACL []zk.ACL

	session *session // set by Connect
}

// Locker is a ZooKeeper lock table on one connection. It is safe for
// concurrent use. It owns a timer per lease it holds and, unless its Config
// came from Connect, the goroutine that reads Config.Events or polls the
// connection's state: Close stops them.
type Locker struct {
	conn *zk.Conn
	sess *session
	root string
	acl  []zk.ACL
	// maxTTL is Config.MaxTTL; 0 bounds TTLs by the session timeout.
	maxTTL time.Duration

	probeMu sync.Mutex // one probe of the session timeout at a time

	stop chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	leases map[string]*record // by node path
}

// record is a lease this Locker holds. Its mutex orders Renew, Release and
// the expiry timer.
type record struct {
	mu      sync.Mutex
	path    string
	czxid   int64
	version int32
	session int64
	expires time.Time // when the timer deletes the node
	timer   *time.Timer
	gone    bool // deleted or lost: nothing may succeed on it any more
}

// New returns a Locker on conn. A nil cfg means defaults (see Config);
// Connect returns a Config that knows the granted session timeout and gets
// every session event at once. Errors wrap aegis.ErrInvalid.
func New(conn *zk.Conn, cfg *Config) (*Locker, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zklease: conn is nil", aegis.ErrInvalid)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.SessionTimeout < 0 {
		return nil, fmt.Errorf("%w: zklease: Config.SessionTimeout %s is negative", aegis.ErrInvalid, c.SessionTimeout)
	}
	if c.MaxTTL < 0 {
		return nil, fmt.Errorf("%w: zklease: Config.MaxTTL %s is negative", aegis.ErrInvalid, c.MaxTTL)
	}
	c.Root = cmp.Or(c.Root, "/aegis/lease")
	if c.ACL == nil {
		c.ACL = zk.WorldACL(zk.PermAll)
	}
	if len(c.ACL) == 0 { // the servers would refuse every create
		return nil, fmt.Errorf("%w: zklease: Config.ACL is empty (nil means the default, zk.WorldACL(zk.PermAll))", aegis.ErrInvalid)
	}
	if err := checkRoot(c.Root); err != nil {
		return nil, err
	}
	l := &Locker{
		conn:   conn,
		sess:   c.session,
		root:   c.Root,
		acl:    c.ACL,
		maxTTL: c.MaxTTL,
		stop:   make(chan struct{}),
		leases: map[string]*record{},
	}
	if l.sess == nil {
		l.sess = newSession(c.SessionTimeout)
		if c.Events != nil {
			l.wg.Go(func() { l.drain(c.Events) })
		} else {
			// The state the poller compares with is read here, not in its
			// goroutine: a session granted before that goroutine first ran
			// would otherwise be its starting state, never a change, and a
			// wait begun before it would sleep until its context ended.
			state, id := conn.State(), conn.SessionID()
			l.wg.Go(func() { l.sess.poll(conn, state, id, l.stop) })
		}
	}
	return l, nil
}

// drain feeds the session events of Config.Events to the Locker.
func (l *Locker) drain(events <-chan zk.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			l.sess.event(ev)
		case <-l.stop:
			return
		}
	}
}

// Close stops the Locker's timers and goroutines and waits for them. It
// does not touch the nodes: the leases it still holds last until their
// session ends, so close the connection (or release them) too. Calls after
// Close fail.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for _, r := range l.leases {
		r.timer.Stop()
	}
	l.leases = map[string]*record{}
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	return nil
}

func checkRoot(root string) error {
	if !strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") {
		return fmt.Errorf("%w: zklease: Config.Root %q must start with / and not end with one", aegis.ErrInvalid, root)
	}
	for _, seg := range strings.Split(root[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%w: zklease: Config.Root %q is not a valid ZooKeeper path", aegis.ErrInvalid, root)
		}
	}
	return nil
}

// dir is the lock node of key.
func (l *Locker) dir(key string) string { return l.root + "/" + keypath.Segment(key) }

// nodeOf returns the path of lease's node, or false when its owner is not
// a node name this package makes ("<32 hex>-<10 digits>"): no such grant.
func (l *Locker) nodeOf(lease *aegis.Lease) (string, bool) {
	if _, ok := sequence(lease.Owner); !ok {
		return "", false
	}
	return l.dir(lease.Key) + "/" + lease.Owner, true
}

// sequence parses the sequence number of a child node's name.
func sequence(name string) (int64, bool) {
	random, seq, ok := strings.Cut(name, "-")
	if !ok || len(random) != 32 || len(seq) != 10 || strings.Trim(random, "0123456789abcdef") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	return n, err == nil
}

// ready waits for the connection to have a session and returns the
// session timeout that bounds local deadlines, learning it first when it is
// not known: the server's list of sessions (cons) tells the one granted;
// when it will not, the ensemble's minSessionTimeout is a safe lower bound.
func (l *Locker) ready(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id, err := l.sess.ready(ctx, l.conn, l.stop)
	if err != nil {
		return 0, err
	}
	if timeout, _ := l.sess.now(); timeout > 0 {
		return timeout, nil
	}
	l.probeMu.Lock()
	defer l.probeMu.Unlock()
	if timeout, _ := l.sess.now(); timeout > 0 {
		return timeout, nil
	}
	server := l.conn.Server()
	timeout, consErr := consTimeout(ctx, server, id)
	if consErr == nil {
		l.sess.setTimeout(timeout)
		return timeout, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	timeout, err = probeMinTimeout(ctx, server)
	if err != nil {
		return 0, fmt.Errorf("learn the session timeout (the minSessionTimeout of %s): %w", server, err)
	}
	l.sess.setLeast(timeout, fmt.Sprintf("the minSessionTimeout of %s; go-zookeeper keeps the session's own timeout to itself, and %s would not list its sessions: %v", server, server, consErr))
	return timeout, nil
}

// checkTTL validates ttl before the session is known: positive, and at
// most Config.MaxTTL when it was raised (aegis.MaxTTL otherwise).
func (l *Locker) checkTTL(ttl time.Duration) error { return driver.CheckTTL(ttl, l.maxTTL) }

// fits refuses, unless Config.MaxTTL was raised, a ttl longer than the
// session timeout.
func (l *Locker) fits(ttl, timeout time.Duration) error {
	if l.maxTTL != 0 || ttl <= timeout {
		return nil
	}
	if _, least := l.sess.bound(); least != "" {
		return fmt.Errorf("%w: ttl %s is longer than %s, the least session timeout the ZooKeeper ensemble grants and all this Locker knows of its session's (%s): pass the session timeout the ensemble granted as Config.SessionTimeout (the one asked of zk.Connect, when within the servers' minSessionTimeout and maxSessionTimeout), or connect with zklease.Connect, which reads it, or add cons to the servers' 4lw.commands.whitelist, or raise Config.MaxTTL and renew within each session timeout", aegis.ErrInvalid, ttl, timeout, least)
	}
	return fmt.Errorf("%w: ttl %s is longer than the ZooKeeper session timeout %s: connect with a longer session timeout (the servers' maxSessionTimeout caps it), or raise Config.MaxTTL and renew within each session timeout", aegis.ErrInvalid, ttl, timeout)
}

// deadline is the local deadline of a grant or renewal for ttl whose
// request was sent at start, on a session of the given timeout: the lease
// is trusted while both its TTL timer and its session must still be alive.
func deadline(start time.Time, ttl, timeout time.Duration) time.Time {
	d := driver.LocalDeadline(start, ttl)
	if s := driver.LocalDeadline(start, timeout); s.Before(d) {
		return s
	}
	return d
}

// TryAcquire grants key for ttl unless another grant holds it or waits for
// it (ErrHeld). It never waits for the key. One round trip when the key is
// free (the create; see create); when the lock node has other children, a
// second one (the children and the node's stat at once) and a third,
// deleting the node, when the key is held.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := l.checkTTL(ttl); err != nil {
		return nil, err
	}
	timeout, err := l.ready(ctx)
	if err != nil {
		return nil, l.fail("acquire", key, err)
	}
	if err := l.fits(ttl, timeout); err != nil {
		return nil, err
	}
	start := time.Now()
	n, err := call(l, ctx, func() (node, error) { return l.create(key) }, l.drop)
	if err != nil {
		return nil, l.fail("acquire", key, err)
	}
	if !n.known() {
		err = l.settle(ctx, &n)
	}
	if err != nil || !n.first() {
		l.drop(n)
		if err == nil {
			err = aegis.ErrHeld
		}
		return nil, l.fail("acquire", key, err)
	}
	return l.hold(ctx, key, n, start, ttl, timeout)
}

// hold records a granted node and starts its expiry timer. When the Locker
// was closed meanwhile it deletes the node instead.
func (l *Locker) hold(ctx context.Context, key string, n node, start time.Time, ttl, timeout time.Duration) (*aegis.Lease, error) {
	r := &record{path: n.path, czxid: n.stat.Czxid, version: n.stat.Version, session: n.stat.EphemeralOwner}
	r.expires = time.Now().Add(ttl)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = l.conn.Delete(n.path, n.stat.Version) // best effort: the session takes it otherwise
		return nil, l.fail("acquire", key, errClosed)
	}
	l.leases[r.path] = r
	r.timer = time.AfterFunc(ttl, func() { l.expire(r) })
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// The caller left while the grant was recorded: hand it back.
		_ = l.Release(context.WithoutCancel(ctx), &aegis.Lease{Key: key, Token: aegis.Token(r.czxid), Owner: n.name})
		return nil, l.fail("acquire", key, err)
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(n.stat.Czxid),
		Owner:    n.name,
		TTL:      ttl,
		Deadline: deadline(start, ttl, timeout),
	}, nil
}
