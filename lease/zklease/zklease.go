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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/internal/reach"
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
	// guess. Default 0: at the first call the Locker asks the server it is
	// connected to for its minSessionTimeout (a handshake of its own), which
	// no session of the ensemble can undercut when its members share it.
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
			l.wg.Go(func() { l.sess.poll(conn, l.stop) })
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
// session timeout that bounds local deadlines, probing it first when it is
// not known.
func (l *Locker) ready(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if _, err := l.sess.ready(ctx, l.conn, l.stop); err != nil {
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
	timeout, err := probeMinTimeout(ctx, server)
	if err != nil {
		return 0, fmt.Errorf("learn the session timeout (the minSessionTimeout of %s): %w", server, err)
	}
	l.sess.setTimeout(timeout)
	return timeout, nil
}

// checkTTL validates ttl before the session is known: positive, and at
// most Config.MaxTTL when it was raised (aegis.MaxTTL otherwise).
func (l *Locker) checkTTL(ttl time.Duration) error { return aegis.CheckTTL(ttl, l.maxTTL) }

// fits refuses, unless Config.MaxTTL was raised, a ttl longer than the
// session timeout.
func (l *Locker) fits(ttl, timeout time.Duration) error {
	if l.maxTTL == 0 && ttl > timeout {
		return fmt.Errorf("%w: ttl %s is longer than the ZooKeeper session timeout %s: connect with a longer session timeout (the servers' maxSessionTimeout caps it), or raise Config.MaxTTL and renew within each session timeout", aegis.ErrInvalid, ttl, timeout)
	}
	return nil
}

// deadline is the local deadline of a grant or renewal for ttl whose
// request was sent at start, on a session of the given timeout: the lease
// is trusted while both its TTL timer and its session must still be alive.
func deadline(start time.Time, ttl, timeout time.Duration) time.Time {
	d := aegis.LocalDeadline(start, ttl)
	if s := aegis.LocalDeadline(start, timeout); s.Before(d) {
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
	if err := aegis.CheckKey(key); err != nil {
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

// node is a child just created under a lock node, with its stat and its
// siblings as read after the create.
type node struct {
	name, path string
	session    int64
	seq        int64
	stat       *zk.Stat
	siblings   []string // names, including name, lowest sequence first
}

// first reports whether n has the lowest sequence among its siblings.
func (n node) first() bool { return len(n.siblings) > 0 && n.siblings[0] == n.name }

// predecessor is the sibling just before n, or "" when n is first.
func (n node) predecessor() string {
	for i, s := range n.siblings {
		if s == n.name {
			if i == 0 {
				return ""
			}
			return n.siblings[i-1]
		}
	}
	return ""
}

// create creates this grant's ephemeral sequential node under key's lock
// node, creating the lock node (and the root) when missing. The node's
// session is the connection's at the create. When the answer is lost with
// the connection, the create may still have landed: the node, found by its
// random name, is discarded so that it does not block the key.
//
// The create goes in a multi with an unconditional setData of the lock
// node: go-zookeeper's Create drops the create's stat, but a multi is one
// transaction with one zxid, and the setData's answer is the lock node's
// stat after it, whose mzxid is therefore the new node's czxid (the token)
// and whose numChildren counts the new node. A lone child is the holder, so
// an uncontended grant takes this one round trip. When the lock node's ACL
// refuses the setData, a plain create is sent and look reads the stat.
func (l *Locker) create(key string) (node, error) {
	dir := l.dir(key)
	name := owner.New() + "-"
	session := l.conn.SessionID()
	var (
		path  string
		stat  *zk.Stat
		err   error
		multi = true
	)
	for attempt := 0; ; attempt++ {
		if multi {
			path, stat, err = l.createMulti(dir, name)
			if errors.Is(err, zk.ErrNoAuth) {
				multi = false
				continue
			}
		} else {
			path, err = l.conn.Create(dir+"/"+name, nil, zk.FlagEphemeralSequential, l.acl)
		}
		if errors.Is(err, zk.ErrNoNode) && attempt < 3 {
			// The lock node is missing, or its container was just reaped.
			if err = l.ensure(dir, zk.FlagContainer); err != nil {
				return node{}, err
			}
			continue
		}
		break
	}
	if transient(err) {
		l.discard(dir, name, session)
	}
	if err != nil {
		return node{}, err
	}
	if !strings.HasPrefix(path, dir+"/") { // a server answering another path: not ours to slice
		return node{}, fmt.Errorf("create under %q answered the path %q", dir, path)
	}
	n := node{name: path[len(dir)+1:], path: path, session: session}
	n.seq, _ = sequence(n.name)
	// The create ran on the session it was sent on; if the connection's
	// session is still the one read before it, that is n.session.
	if stat != nil && l.conn.SessionID() == session {
		n.stat = &zk.Stat{Czxid: stat.Mzxid, Mzxid: stat.Mzxid, EphemeralOwner: session} // version 0: just created
		if stat.NumChildren == 1 {
			n.siblings = []string{n.name}
		}
	}
	return n, nil
}

// createMulti creates the node and sets the lock node's data in one
// multi, returning the created path and the lock node's stat after it.
func (l *Locker) createMulti(dir, name string) (string, *zk.Stat, error) {
	res, err := l.conn.Multi(
		&zk.CreateRequest{Path: dir + "/" + name, Acl: l.acl, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: dir, Version: -1},
	)
	if err = multiErr(res, err); err != nil {
		return "", nil, err
	}
	if len(res) != 2 || res[1].Stat == nil {
		return "", nil, fmt.Errorf("create under %q: the multi answered %d results", dir, len(res))
	}
	return res[0].String, res[1].Stat, nil
}

// known reports whether the create's answer told all that settle would
// read: n's stat, and that n is the only child.
func (n node) known() bool { return n.stat != nil && n.first() }

// settle looks at n (its siblings and stat) until it gets an answer: a
// dropped connection is waited out, as long as n's session lasts.
func (l *Locker) settle(ctx context.Context, n *node) error {
	for {
		_, _, changed := l.sessNow()
		if l.conn.SessionID() != n.session {
			return zk.ErrSessionExpired
		}
		_, err := call(l, ctx, func() (struct{}, error) { return struct{}{}, l.look(n) }, nil)
		if err == nil && n.stat.EphemeralOwner != n.session {
			return zk.ErrSessionExpired
		}
		if !transient(err) {
			return err
		}
		if err := l.waitEvent(ctx, changed); err != nil {
			return err
		}
	}
}

// discard deletes, in the background, the nodes under dir whose names
// start with prefix (a node's full name, or the random part of one whose
// create lost its answer), retrying across disconnections until they are
// gone, their session ended, or the Locker closed: a node nobody waits for
// must not block the key while the session lives on.
func (l *Locker) discard(dir, prefix string, session int64) {
	if !l.enter() {
		return
	}
	go func() {
		defer l.wg.Done()
		for {
			_, _, changed := l.sessNow()
			if l.conn.SessionID() != session {
				return // the session, and its nodes, are gone
			}
			children, _, err := l.conn.Children(dir)
			if err == nil {
				for _, c := range children {
					if strings.HasPrefix(c, prefix) {
						if derr := l.conn.Delete(dir+"/"+c, -1); transient(derr) {
							err = derr
						}
					}
				}
			}
			if !transient(err) {
				return
			}
			select {
			case <-changed:
			case <-l.stop:
				return
			}
		}
	}()
}

// look reads n's siblings and n's stat, two requests in flight at once
// (zk pipelines them on the connection).
func (l *Locker) look(n *node) error {
	var (
		stat    *zk.Stat
		exists  bool
		statErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		exists, stat, statErr = l.conn.Exists(n.path)
	}()
	children, _, err := l.conn.Children(n.path[:strings.LastIndexByte(n.path, '/')])
	<-done
	if err == nil {
		err = statErr
	}
	if err == nil && !exists {
		err = zk.ErrNoNode // the session ended under us
	}
	if err != nil {
		return err
	}
	n.stat = stat
	n.siblings = bySequence(children)
	return nil
}

// bySequence sorts node names by their sequence, dropping names this
// package does not make.
func bySequence(names []string) []string {
	type child struct {
		name string
		seq  int64
	}
	cs := make([]child, 0, len(names))
	for _, name := range names {
		if seq, ok := sequence(name); ok {
			cs = append(cs, child{name, seq})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].seq < cs[j].seq })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// ensure creates path (with the given flags) and its missing parents
// (persistent).
func (l *Locker) ensure(path string, flags int32) error {
	var err error
	if flags == zk.FlagContainer {
		_, err = l.conn.CreateContainer(path, nil, flags, l.acl)
	} else {
		_, err = l.conn.Create(path, nil, flags, l.acl)
	}
	if errors.Is(err, zk.ErrNoNode) {
		parent := path[:strings.LastIndexByte(path, '/')]
		if parent == "" {
			return err
		}
		if err := l.ensure(parent, zk.FlagPersistent); err != nil {
			return err
		}
		return l.ensure(path, flags)
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// drop deletes a node created for a grant that is not going ahead, in the
// background, retrying across disconnections (see discard).
func (l *Locker) drop(n node) {
	l.discard(n.path[:len(n.path)-len(n.name)-1], n.name, n.session)
}

// Renew checks, through the leader, that lease's node still exists and
// that the connection is still on the session that created it, and moves
// the node's expiry to ttl from now; ErrLost otherwise. One round trip.
// While disconnected it waits for the session to come back until ctx ends.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := l.checkTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return l.fail("renew", lease.Key, err)
	}
	r := l.record(lease)
	if r == nil {
		return lost("renew", lease.Key, reasonUnknown)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := l.usable(r, "renew", lease.Key); err != nil {
		return err
	}
	_, timeout, _ := l.sessNow()
	if err := l.fits(ttl, timeout); err != nil {
		return l.fail("renew", lease.Key, err)
	}
	start := time.Now()
	err := l.retryOn(ctx, r.session, func() error {
		res, err := l.conn.Multi(&zk.CheckVersionRequest{Path: r.path, Version: r.version})
		return multiErr(res, err)
	})
	if err != nil {
		return l.lost(r, "renew", lease.Key, err)
	}
	r.expires = time.Now().Add(ttl)
	r.timer.Reset(ttl)
	lease.TTL = ttl
	lease.Deadline = deadline(start, ttl, timeout)
	return nil
}

func (l *Locker) sessNow() (int64, time.Duration, <-chan struct{}) {
	timeout, changed := l.sess.now()
	return l.conn.SessionID(), timeout, changed
}

// Release deletes lease's node, checked by its version, if lease still
// holds it; ErrLost otherwise, changing nothing. One round trip. While
// disconnected it waits for the session to come back until ctx ends; when
// it gives up, the node goes at its expiry.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return l.fail("release", lease.Key, err)
	}
	r := l.record(lease)
	if r == nil {
		return lost("release", lease.Key, reasonUnknown)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := l.usable(r, "release", lease.Key); err != nil {
		return err
	}
	err := l.retryOn(ctx, r.session, func() error { return l.conn.Delete(r.path, r.version) })
	if err != nil {
		return l.lost(r, "release", lease.Key, err)
	}
	l.forget(r)
	return nil
}

// record finds the record of lease: its node, its token.
func (l *Locker) record(lease *aegis.Lease) *record {
	path, ok := l.nodeOf(lease)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.leases[path]
	if r == nil || r.czxid != int64(lease.Token) {
		return nil
	}
	return r
}

// usable fails with ErrLost when r was deleted, expired by its TTL, or
// belongs to a session the connection no longer has. r.mu is held.
func (l *Locker) usable(r *record, op, key string) error {
	switch {
	case r.gone:
		return lost(op, key, reasonGone)
	case l.conn.SessionID() != r.session:
		l.forget(r) // its session ended: so did its node
		return lost(op, key, reasonSession)
	case !time.Now().Before(r.expires):
		return lost(op, key, reasonTTL) // the timer is deleting it
	}
	return nil
}

// retryOn runs op until it succeeds or fails for good. A dropped connection
// (ErrConnectionClosed, ErrNoServer) is not an answer: it waits for the
// next session event and tries again, unless the session changed, ctx
// ended or the Locker closed.
func (l *Locker) retryOn(ctx context.Context, session int64, op func() error) error {
	for {
		_, _, changed := l.sessNow()
		if l.conn.SessionID() != session {
			return zk.ErrSessionExpired // its ephemeral nodes are gone
		}
		_, err := call(l, ctx, func() (struct{}, error) { return struct{}{}, op() }, nil)
		if !transient(err) {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stop:
			return errClosed
		}
	}
}

func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer)
}

// multiErr is the first error of a multi.
func multiErr(res []zk.MultiResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}

// lost turns an answer that the node is gone into ErrLost (forgetting the
// record) and wraps anything else. r.mu is held.
func (l *Locker) lost(r *record, op, key string, err error) error {
	switch {
	case errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion):
		l.forget(r)
		return lost(op, key, reasonGone)
	case errors.Is(err, zk.ErrSessionExpired):
		l.forget(r)
		return lost(op, key, reasonSession)
	}
	return l.fail(op, key, err)
}

// Why a lease is lost, as the error says it.
const (
	reasonGone    = "node deleted or changed (released, expired, or its session ended)"
	reasonSession = "session expired: the connection is on another session, and the node went with the old one"
	reasonTTL     = "ttl passed without renewal"
	reasonUnknown = "not held through this Locker (released, expired, granted by another Locker, or forged)"
)

// lost is aegis.ErrLost for op on key, saying why.
func lost(op, key, reason string) error {
	return fmt.Errorf("zklease: %s %q: %s: %w", op, key, reason, aegis.ErrLost)
}

// forget marks r gone and drops it. r.mu is held.
func (l *Locker) forget(r *record) {
	r.gone = true
	r.timer.Stop()
	l.mu.Lock()
	if l.leases[r.path] == r {
		delete(l.leases, r.path)
	}
	l.mu.Unlock()
}

// expire runs when r's TTL passed without a renewal: it deletes the node,
// retrying across disconnections until it is gone, its session ended, or
// the Locker closed.
func (l *Locker) expire(r *record) {
	if !l.enter() {
		return
	}
	defer l.wg.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return
	}
	if d := time.Until(r.expires); d > 0 { // renewed while we waited for r.mu
		r.timer.Reset(d)
		return
	}
	if l.conn.SessionID() == r.session {
		// retry ends when the Locker closes.
		_ = l.retryOn(context.Background(), r.session, func() error { return l.conn.Delete(r.path, r.version) })
	}
	l.forget(r)
}

// enter counts a goroutine of the Locker in, unless it was closed.
func (l *Locker) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

// fail wraps an error of op on key. ErrHeld and ErrLost pass unchanged.
// A call that ran out of time without a session says why there is none:
// zk only logs its dial errors, so the caller would see "context deadline
// exceeded" alone.
func (l *Locker) fail(op, key string, err error) error {
	if errors.Is(err, aegis.ErrHeld) || errors.Is(err, aegis.ErrLost) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if why := l.noSession(); why != "" {
			return fmt.Errorf("zklease: %s %q: %s: %w", op, key, why, err)
		}
	}
	return fmt.Errorf("zklease: %s %q: %w", op, key, err)
}

// noSession describes why the connection has no session ("" when it has
// one): the dial errors Connect saw, or else a dial of the server zk is
// trying now.
func (l *Locker) noSession() string {
	state := l.conn.State()
	if state == zk.StateHasSession {
		return ""
	}
	why := "no ZooKeeper session (" + state.String() + ")"
	if p := l.sess.dialProblems(); p != "" {
		return why + ": " + p
	}
	if server := l.conn.Server(); server != "" {
		if err := reach.Dial(context.Background(), "tcp", server, probeTimeout); err != nil {
			return why + ": server " + server + ": " + err.Error()
		}
	}
	return why
}

// probeTimeout bounds the dial of noSession.
const probeTimeout = 500 * time.Millisecond

// call runs op on a goroutine of the Locker and returns its result, or
// ctx's error when ctx ends first (zk's calls take no context). undo, if
// not nil, then gets op's result once op returns, so that a node created
// for a caller who left does not stay behind.
func call[T any](l *Locker, ctx context.Context, op func() (T, error), undo func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
		ch        = make(chan result, 1)
	)
	if !l.enter() {
		var zero T
		return zero, errClosed
	}
	go func() {
		defer l.wg.Done()
		v, err := op()
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if err == nil && undo != nil {
				undo(v)
			}
			return
		}
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-ch:
			return r.v, r.err
		default:
		}
		abandoned = true
		var zero T
		return zero, ctx.Err()
	}
}
