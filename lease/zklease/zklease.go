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
//   - A lease's TTL must not exceed the session timeout the ensemble granted
//     (longer TTLs are rejected with aegis.ErrInvalid). A successful grant or
//     Renew is a request the ensemble answered, after which the session
//     lives at least one session timeout, and the lease's local Deadline,
//     TTL after the request was sent, passes before the session can expire.
//   - The Locker deletes the node itself TTL after the last grant or Renew
//     (a timer per lease, checked by the node's version), so an unrenewed
//     lease ends after its TTL like on every backend, and a Renew with a
//     shorter TTL (lockAtLeastFor) makes the node go about that TTL from
//     now. If the process dies or is cut off first, the session timeout
//     bounds the lease instead: the key is free one session timeout after
//     the ensemble last heard from the process.
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
)

var (
	_ aegis.Locker = (*Locker)(nil)
	_ aegis.Waiter = (*Locker)(nil)
)

var errClosed = errors.New("zklease: locker closed")

// Config configures a Locker. Connect returns one filled in; with a
// connection made by zk.Connect, Events and SessionTimeout are required.
type Config struct {
	// Events is the session event channel zk.Connect returned with the
	// connection. The Locker reads it (so nothing else may) until it is
	// closed or the Locker is. Not needed with a Config from Connect.
	Events <-chan zk.Event
	// SessionTimeout is the session timeout the ensemble granted: the one
	// asked for, clamped to the servers' [minSessionTimeout,
	// maxSessionTimeout] (by default 2 and 20 ticks). TTLs longer than it are
	// rejected. It must not exceed what the servers grant, or the local
	// deadline can pass after the session expired; Connect reads the granted
	// value from the wire and needs no guess. Required with Events.
	SessionTimeout time.Duration
	// Root is the node under which every lock lives, created when missing.
	// Default "/aegis/lease".
	Root string
	// ACL is the ACL of the nodes the Locker creates. Default
	// zk.WorldACL(zk.PermAll).
	ACL []zk.ACL

	session *session // set by Connect
}

// Locker is a ZooKeeper lock table on one connection. It is safe for
// concurrent use. It owns a timer per lease it holds and, with
// Config.Events, the goroutine that reads them: Close stops them.
type Locker struct {
	conn *zk.Conn
	sess *session
	root string
	acl  []zk.ACL

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

// New returns a Locker on conn. cfg is required (see Config): Connect
// returns one.
func New(conn *zk.Conn, cfg *Config) (*Locker, error) {
	if conn == nil {
		return nil, errors.New("zklease: conn is nil")
	}
	if cfg == nil {
		return nil, errors.New("zklease: Config is required: connect with zklease.Connect, or give the Events and SessionTimeout of zk.Connect")
	}
	c := *cfg
	c.Root = cmp.Or(c.Root, "/aegis/lease")
	if c.ACL == nil {
		c.ACL = zk.WorldACL(zk.PermAll)
	}
	if err := checkRoot(c.Root); err != nil {
		return nil, err
	}
	l := &Locker{
		conn:   conn,
		sess:   c.session,
		root:   c.Root,
		acl:    c.ACL,
		stop:   make(chan struct{}),
		leases: map[string]*record{},
	}
	if l.sess == nil {
		switch {
		case c.Events == nil:
			return nil, errors.New("zklease: Config.Events is required (the channel zk.Connect returned), or connect with zklease.Connect")
		case c.SessionTimeout <= 0:
			return nil, fmt.Errorf("zklease: Config.SessionTimeout %s is not positive: give the session timeout the ensemble granted", c.SessionTimeout)
		}
		l.sess = newSession(c.SessionTimeout)
		l.wg.Go(func() { l.drain(c.Events) })
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
		return fmt.Errorf("zklease: Config.Root %q must start with / and not end with one", root)
	}
	for _, seg := range strings.Split(root[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("zklease: Config.Root %q is not a valid ZooKeeper path", root)
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

// ready validates ttl against the granted session timeout and returns the
// session id, once the connection has a session.
func (l *Locker) ready(ctx context.Context, ttl time.Duration) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id, timeout, err := l.sess.ready(ctx, l.conn, l.stop)
	if err != nil {
		return 0, err
	}
	if ttl > timeout {
		return 0, errTooLong(ttl, timeout)
	}
	return id, nil
}

func errTooLong(ttl, timeout time.Duration) error {
	return fmt.Errorf("%w: ttl %s is longer than the ZooKeeper session timeout %s: a lease cannot outlive the session it is checked against; connect with a longer session timeout (the servers' maxSessionTimeout caps it)", aegis.ErrInvalid, ttl, timeout)
}

// TryAcquire grants key for ttl unless another grant holds it or waits for
// it (ErrHeld). It never waits for the key. Two round trips (the create,
// then the children and the node's stat at once); a third, deleting the
// node, when the key is held.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := aegis.CheckKey(key); err != nil {
		return nil, err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	if _, err := l.ready(ctx, ttl); err != nil {
		return nil, l.fail("acquire", key, err)
	}
	start := time.Now()
	n, err := call(l, ctx, func() (node, error) { return l.create(key) }, l.drop)
	if err != nil {
		return nil, l.fail("acquire", key, err)
	}
	if err := l.settle(ctx, &n); err != nil || !n.first() {
		l.drop(n)
		if err == nil {
			err = aegis.ErrHeld
		}
		return nil, l.fail("acquire", key, err)
	}
	return l.hold(ctx, key, n, start, ttl)
}

// hold records a granted node and starts its expiry timer. When the Locker
// was closed meanwhile it deletes the node instead.
func (l *Locker) hold(ctx context.Context, key string, n node, start time.Time, ttl time.Duration) (*aegis.Lease, error) {
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
		Deadline: aegis.LocalDeadline(start, ttl),
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
func (l *Locker) create(key string) (node, error) {
	dir := l.dir(key)
	name := owner.New() + "-"
	session := l.conn.SessionID()
	var path string
	var err error
	for attempt := 0; ; attempt++ {
		path, err = l.conn.Create(dir+"/"+name, nil, zk.FlagEphemeralSequential, l.acl)
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
	n := node{name: path[len(dir)+1:], path: path, session: session}
	n.seq, _ = sequence(n.name)
	return n, nil
}

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
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return l.fail("renew", lease.Key, err)
	}
	r := l.record(lease)
	if r == nil {
		return aegis.ErrLost
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := l.usable(r); err != nil {
		return err
	}
	if _, timeout, _ := l.sessNow(); ttl > timeout {
		return l.fail("renew", lease.Key, errTooLong(ttl, timeout))
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
	lease.Deadline = aegis.LocalDeadline(start, ttl)
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
		return aegis.ErrLost
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := l.usable(r); err != nil {
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
func (l *Locker) usable(r *record) error {
	switch {
	case r.gone:
		return aegis.ErrLost
	case l.conn.SessionID() != r.session:
		l.forget(r) // its session ended: so did its node
		return aegis.ErrLost
	case !time.Now().Before(r.expires):
		return aegis.ErrLost // the timer is deleting it
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
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrSessionExpired) {
		l.forget(r)
		return aegis.ErrLost
	}
	return l.fail(op, key, err)
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
func (l *Locker) fail(op, key string, err error) error {
	if errors.Is(err, aegis.ErrHeld) || errors.Is(err, aegis.ErrLost) {
		return err
	}
	return fmt.Errorf("zklease: %s %q: %w", op, key, err)
}

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
