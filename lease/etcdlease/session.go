package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/keypath"
	"github.com/aegislab/aegis/internal/owner"
)

// Session mode (Config.Session): every grant's key hangs on one etcd lease
// of the Locker, its session, which a goroutine of the Locker keeps alive
// every SessionTTL/3; each grant's TTL is a timer of the Locker that deletes
// the key (checked by its create revision) TTL after the grant or the last
// Renew. A grant and a release are then one transaction each, like a
// concurrency.Mutex on a shared session, where a lease per grant costs a
// grant and a revoke more. A grant's key is "<session lease id>-<slot>"
// under the lock's prefix, where the slot is the lowest one no grant or
// campaign of this Locker on that lock uses: two grants of one session
// never share a key (which is how two Mutexes on one session pass each
// other), and one process locking a key again and again reuses one etcd
// key, as a Mutex on a shared session does. A new key per grant would leave
// a deleted key per grant in etcd's index until the next compaction, and
// every grant's read of the lock's first key walks them all: measured, the
// grant slowed down as the run went on.

var errClosed = errors.New("etcdlease: locker closed")

// session is one etcd lease of a Locker in session mode.
type session struct {
	id   clientv3.LeaseID
	lost chan struct{} // closed when the etcd lease is known to be gone
	// slots in use, by lock prefix; guarded by the Locker's mu.
	slots map[string]map[int]bool

	mu       sync.Mutex
	deadline time.Time // local and conservative: the etcd lease lives at least until then
}

func (s *session) trusted() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// extend moves the deadline to d if d is later: keep-alives of the loop
// and of Renew may answer out of order.
func (s *session) extend(d time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.After(s.deadline) {
		s.deadline = d
	}
}

func (s *session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// record is a grant of this Locker in session mode. Its mutex orders Renew,
// Release and the expiry timer.
type record struct {
	mu      sync.Mutex
	key     string
	owner   string
	slot    slot
	path    string
	token   int64
	sess    *session
	expires time.Time // when the timer deletes the key
	timer   *time.Timer
	gone    bool // released, expired or lost: nothing may succeed on it any more
}

// current returns the Locker's session, granting one (and starting its
// keep-alive) when there is none or the last one was lost.
func (l *Locker) current(ctx context.Context) (*session, error) {
	l.mu.Lock()
	s, closed := l.sess, l.closed
	l.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if s != nil && !s.isLost() {
		return s, nil
	}
	l.grantMu.Lock() // one grant at a time: concurrent callers share it
	defer l.grantMu.Unlock()
	l.mu.Lock()
	s = l.sess
	l.mu.Unlock()
	if s != nil && !s.isLost() {
		return s, nil
	}
	start := time.Now()
	resp, err := l.client.Grant(ctx, l.sessionSecs)
	if err != nil {
		return nil, err
	}
	if resp.TTL > l.sessionSecs {
		l.revoke(ctx, resp.ID)
		return nil, fmt.Errorf("%w: Config.SessionTTL %d s is below this etcd cluster's minimum lease TTL of %d s (1.5 × its election timeout, rounded up)", aegis.ErrInvalid, l.sessionSecs, resp.TTL)
	}
	s = &session{id: resp.ID, lost: make(chan struct{}), slots: map[string]map[int]bool{}, deadline: driver.LocalDeadline(start, time.Duration(resp.TTL)*time.Second)}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.revoke(ctx, s.id)
		return nil, errClosed
	}
	l.sess = s
	l.wg.Add(1)
	l.mu.Unlock()
	go l.keepSession(s)
	return s, nil
}

// keepSession refreshes s every SessionTTL/3 until it is lost or the
// Locker closes. A failed keep-alive is tried again soon: the etcd lease
// outlives a short outage, and only the cluster's answer that it is gone
// ends the session.
func (l *Locker) keepSession(s *session) {
	defer l.wg.Done()
	every := time.Duration(l.sessionSecs) * time.Second / 3
	wait := every
	for {
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-s.lost:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := l.keepOnce(ctx, s)
		cancel()
		switch {
		case errors.Is(err, aegis.ErrLost):
			return
		case err != nil:
			wait = min(every, 250*time.Millisecond)
		default:
			wait = every
		}
	}
}

// keepOnce sends one keep-alive of s and moves its deadline; an answer that
// the etcd lease is gone loses the session (aegis.ErrLost).
func (l *Locker) keepOnce(ctx context.Context, s *session) error {
	sent := time.Now()
	ka, err := l.client.KeepAliveOnce(ctx, s.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && ka.TTL <= 0 {
		l.sessionLost(s)
		return fmt.Errorf("etcdlease: %s: %w", reasonSessionLost, aegis.ErrLost)
	}
	if err != nil {
		return err
	}
	s.extend(driver.LocalDeadline(sent, time.Duration(ka.TTL)*time.Second))
	return nil
}

// sessionLost marks s lost: its etcd lease, and every key on it, is gone.
// The next grant starts a new session.
func (l *Locker) sessionLost(s *session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.isLost() {
		return
	}
	close(s.lost)
	if l.sess == s {
		l.sess = nil
	}
	for own, r := range l.records {
		if r.sess == s {
			r.timer.Stop()
			delete(l.records, own)
			// r.gone is set under r.mu by whoever looks at r next
			// (usable sees the lost session).
		}
	}
}

// cover returns how long s can be trusted, refreshing it first when its
// known deadline comes before want (a Renew for longer than what the loop
// keeps ahead). A refresh that fails for a reason other than the etcd lease being
// gone leaves the deadline as it was: the caller's deadline is the earlier.
func (l *Locker) cover(ctx context.Context, s *session, want time.Time) (time.Time, error) {
	if d := s.trusted(); !d.Before(want) {
		return d, nil
	}
	if err := l.keepOnce(ctx, s); errors.Is(err, aegis.ErrLost) {
		return time.Time{}, err
	}
	return s.trusted(), nil
}

// slot is a grant's key: a lock's prefix, and a number of the session.
type slot struct {
	prefix string
	n      int
}

// claim takes the lowest free slot of s under prefix.
func (l *Locker) claim(s *session, prefix string) slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	used := s.slots[prefix]
	if used == nil {
		used = map[int]bool{}
		s.slots[prefix] = used
	}
	n := 0
	for used[n] {
		n++
	}
	used[n] = true
	return slot{prefix: prefix, n: n}
}

// unclaim frees a slot of s.
func (l *Locker) unclaim(s *session, sl slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if used := s.slots[sl.prefix]; used != nil {
		delete(used, sl.n)
		if len(used) == 0 {
			delete(s.slots, sl.prefix)
		}
	}
}

// path is the slot's etcd key on session s.
func (sl slot) path(s *session) string {
	return sl.prefix + fmt.Sprintf("%016x", uint64(s.id)) + "-" + strconv.Itoa(sl.n)
}

// sessionOwner names a new grant on s: the etcd lease in hex, then a random
// part (the format grantOf parses).
func sessionOwner(s *session) string {
	return fmt.Sprintf("%016x", uint64(s.id)) + "." + owner.New()
}

// putFirst puts sl's key on s and reads the lock's first key, in one
// transaction, as concurrency.Mutex does. (A compare on the whole prefix,
// what per-grant mode sends so that a refused attempt writes nothing,
// measured slower.) A key left in the free slot by an expiry whose delete
// has not landed yet is stale: it is deleted, and the put sent again.
func (l *Locker) putFirst(ctx context.Context, s *session, sl slot) (*clientv3.TxnResponse, error) {
	path := sl.path(s)
	for again := false; ; again = true {
		resp, err := l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(path), "=", 0)).
			Then(clientv3.OpPut(path, "", clientv3.WithLease(s.id)), clientv3.OpGet(sl.prefix, clientv3.WithFirstCreate()...)).
			Commit()
		if err != nil || resp.Succeeded {
			if err == nil && len(resp.Responses) < 2 {
				err = fmt.Errorf("the transaction answered %d results", len(resp.Responses))
			}
			return resp, err
		}
		if again {
			return nil, fmt.Errorf("key %q exists already", path)
		}
		if _, err := l.client.Delete(ctx, path); err != nil {
			return nil, err
		}
	}
}

func (l *Locker) sessionTryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	prefix := l.prefix + keypath.Segment(key) + "/"
	for attempt := 0; ; attempt++ {
		s, err := l.current(ctx)
		if err != nil {
			return nil, l.fail(ctx, "acquire", key, err)
		}
		sl := l.claim(s, prefix)
		start := time.Now()
		resp, err := l.putFirst(ctx, s, sl)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			l.sessionLost(s) // expired under us (a pause past SessionTTL): start a new one
			continue
		}
		if err != nil {
			l.discard(ctx, s, sl) // a cancelled put may have landed
			return nil, l.fail(ctx, "acquire", key, err)
		}
		rev := resp.Header.Revision
		if first := resp.Responses[1].GetResponseRange().GetKvs(); len(first) == 0 || first[0].CreateRevision != rev {
			l.discard(ctx, s, sl) // an earlier key holds or waits
			return nil, aegis.ErrHeld
		}
		lease, err := l.record(key, s, sl, rev, start, ttl)
		if err != nil {
			l.discard(ctx, s, sl)
		}
		return lease, err
	}
}

// record starts the TTL timer of a grant whose key was just put at rev, and
// returns its lease, whose deadline is the earlier of the TTL's and the
// session's. On error the caller discards the key.
func (l *Locker) record(key string, s *session, sl slot, rev int64, start time.Time, ttl time.Duration) (*aegis.Lease, error) {
	r := &record{key: key, owner: sessionOwner(s), slot: sl, path: sl.path(s), token: rev, sess: s, expires: time.Now().Add(ttl)}
	l.mu.Lock()
	if l.closed || s.isLost() {
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, l.fail(context.Background(), "acquire", key, errClosed)
		}
		return nil, lost("acquire", key, reasonSessionLost)
	}
	l.records[r.owner] = r
	r.timer = time.AfterFunc(ttl, func() { l.expire(r) })
	l.mu.Unlock()
	// No keep-alive here, so that a grant stays one round trip: the loop
	// keeps the session's deadline at least 2/3 SessionTTL ahead, and a TTL
	// longer than that gets the session's deadline until its first Renew.
	deadline := earlier(driver.LocalDeadline(start, ttl), s.trusted())
	return &aegis.Lease{Key: key, Token: aegis.Token(rev), Owner: r.owner, TTL: ttl, Deadline: deadline}, nil
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lookup finds the record of lease: its key, its token. nil when this
// Locker holds no such grant (released, expired, another Locker's, forged).
func (l *Locker) lookup(lease *aegis.Lease) *record {
	if _, ok := l.grantOf(lease); !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[lease.Owner]
	if r == nil || r.key != lease.Key || r.token != int64(lease.Token) {
		return nil
	}
	return r
}

// usable fails with ErrLost when r is gone, its session lost, or its TTL
// passed (the timer is deleting the key). r.mu is held.
func (l *Locker) usable(r *record, op, key string) error {
	switch {
	case r.gone:
		return lost(op, key, reasonGone)
	case r.sess.isLost():
		l.forget(r)
		return lost(op, key, reasonSessionLost)
	case !time.Now().Before(r.expires):
		return lost(op, key, reasonTTL)
	}
	return nil
}

// forget marks r gone, drops it and frees its slot: a later grant in the
// slot puts a key with a new create revision, which r's conditional deletes
// cannot touch. r.mu is held.
func (l *Locker) forget(r *record) {
	if r.gone {
		return
	}
	r.gone = true
	r.timer.Stop()
	l.mu.Lock()
	if l.records[r.owner] == r {
		delete(l.records, r.owner)
	}
	l.mu.Unlock()
	l.unclaim(r.sess, r.slot)
}

func (l *Locker) sessionRenew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	r := l.lookup(lease)
	if r == nil {
		return lost("renew", lease.Key, reasonUnknown)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := l.usable(r, "renew", lease.Key); err != nil {
		return err
	}
	start := time.Now()
	var resp *clientv3.TxnResponse
	err := retryRead(ctx, func() (err error) {
		// A read-only transaction, answered without a raft write. Its get
		// makes it linearizable: etcd serves a transaction with no
		// linearizable range from the member's own state, which may lag.
		resp, err = l.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(r.path), "=", r.token)).
			Then(clientv3.OpGet(r.path, clientv3.WithCountOnly())).
			Commit()
		return err
	})
	if err != nil {
		return l.fail(ctx, "renew", lease.Key, err)
	}
	if !resp.Succeeded {
		l.forget(r)
		return lost("renew", lease.Key, reasonGone)
	}
	// The key exists, so its etcd lease was alive when it was read.
	deadline := driver.LocalDeadline(start, ttl)
	sd, err := l.cover(ctx, r.sess, deadline)
	if err != nil {
		l.forget(r)
		return lost("renew", lease.Key, reasonSessionLost)
	}
	r.expires = time.Now().Add(ttl)
	r.timer.Reset(ttl)
	lease.TTL = ttl
	lease.Deadline = earlier(deadline, sd)
	return nil
}

func (l *Locker) sessionRelease(ctx context.Context, lease *aegis.Lease) error {
	r := l.lookup(lease)
	if r == nil {
		return lost("release", lease.Key, reasonUnknown)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := l.usable(r, "release", lease.Key); err != nil {
		return err
	}
	// A plain delete: while r holds its slot no other grant puts this key,
	// so deleting it can only end this grant, and nothing deleted means the
	// grant had already ended.
	resp, err := l.client.Delete(ctx, r.path)
	if err != nil {
		return l.fail(ctx, "release", lease.Key, err) // the timer deletes the key at its expiry
	}
	l.forget(r)
	if resp.Deleted == 0 {
		return lost("release", lease.Key, reasonGone)
	}
	return nil
}

// expire runs when r's TTL passed without a renewal: it deletes the key,
// retrying until it is gone, its session is lost, or the Locker closes.
func (l *Locker) expire(r *record) {
	if !l.enter() {
		return
	}
	defer l.wg.Done()
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		return
	}
	if d := time.Until(r.expires); d > 0 { // renewed while we waited for r.mu
		r.timer.Reset(d)
		r.mu.Unlock()
		return
	}
	l.forget(r)
	r.mu.Unlock()
	l.deleteKey(r.sess, r.path, r.token)
}

// discard deletes the key of a grant that is not going ahead (a put whose
// answer was lost, a campaign that gave up) and frees its slot: at once,
// and when that fails, in the background until it is gone, its session is
// lost, or the Locker closes, so that it does not block the lock while the
// session lives on. The slot stays taken until then: its delete is
// unconditional, so no other grant may put that key meanwhile.
func (l *Locker) discard(ctx context.Context, s *session, sl slot) {
	path := sl.path(s)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	_, err := l.client.Delete(cctx, path)
	cancel()
	if err == nil || !l.enter() {
		l.unclaim(s, sl)
		return
	}
	go func() {
		defer l.wg.Done()
		l.deleteKey(s, path, 0)
		l.unclaim(s, sl)
	}()
}

// deleteKey deletes path (only at create revision rev, unless rev is 0)
// until it succeeds or is refused, s is lost, or the Locker closes.
func (l *Locker) deleteKey(s *session, path string, rev int64) {
	wait := 10 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		txn := l.client.Txn(ctx)
		if rev != 0 {
			txn = txn.If(clientv3.Compare(clientv3.CreateRevision(path), "=", rev))
		}
		_, err := txn.Then(clientv3.OpDelete(path)).Commit()
		cancel()
		if err == nil {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-s.lost:
			t.Stop()
			return
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
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

// Close stops the Locker's goroutines and timers and waits for them. In
// session mode it then revokes the session's etcd lease, which deletes the
// keys of every grant it still holds (their holders get ErrLost), and calls
// after Close fail. In per-grant mode it does nothing: such a Locker has no
// goroutine of its own. Closing the client is the caller's.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed || !l.session {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	s := l.sess
	for own, r := range l.records {
		r.timer.Stop()
		delete(l.records, own)
	}
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	if s != nil && !s.isLost() {
		l.revoke(context.Background(), s.id)
	}
	return nil
}

func (l *Locker) sessionAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("etcdlease: acquire %q: %w", key, err)
		}
		lease, err := l.sessionCampaign(ctx, key, ttl)
		if !errors.Is(err, errCampaignLost) {
			return lease, err
		}
	}
}

// sessionCampaign is one place in key's queue, from the put to the grant.
func (l *Locker) sessionCampaign(ctx context.Context, key string, ttl time.Duration) (_ *aegis.Lease, err error) {
	putCtx, cancel := l.bound(ctx) // taking a place in the queue: see Acquire
	defer cancel()
	s, err := l.current(putCtx)
	if err != nil {
		return nil, l.fail(putCtx, "acquire", key, err)
	}
	prefix := l.prefix + keypath.Segment(key) + "/"
	sl := l.claim(s, prefix)
	start := time.Now()
	resp, err := l.putFirst(putCtx, s, sl)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		l.unclaim(s, sl)
		l.sessionLost(s)
		return nil, errCampaignLost
	}
	defer func() {
		if err != nil {
			l.discard(ctx, s, sl) // leave the queue; a cancelled put may have landed
		}
	}()
	if err != nil {
		return nil, l.fail(putCtx, "acquire", key, err)
	}
	rev := resp.Header.Revision // our key's create revision: the token
	if first := resp.Responses[1].GetResponseRange().GetKvs(); len(first) > 0 && first[0].CreateRevision == rev {
		return l.record(key, s, sl, rev, start, ttl)
	}
	g := grant{prefix: prefix, path: sl.path(s)}
	for {
		start = time.Now()
		pred, at, err := l.predecessor(ctx, key, g, rev)
		if err != nil {
			return nil, err
		}
		if pred == "" {
			break // our key existed at that read, with no earlier one
		}
		if err := l.waitDeleteSession(ctx, key, s, pred, at); err != nil {
			return nil, err
		}
	}
	return l.record(key, s, sl, rev, start, ttl)
}

// waitDeleteSession watches pred, from the revision after at, until it is
// deleted, the watch ends (the caller checks again), the session is lost
// (errCampaignLost: our key went with it), or ctx ends.
func (l *Locker) waitDeleteSession(ctx context.Context, key string, s *session, pred string, at int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	events := l.client.Watch(wctx, pred, clientv3.WithRev(at+1), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdlease: acquire %q: %w", key, ctx.Err())
		case <-s.lost:
			return errCampaignLost
		case <-l.stop:
			return l.fail(ctx, "acquire", key, errClosed)
		case resp, ok := <-events:
			if !ok || resp.Err() != nil || resp.Canceled {
				return nil
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}
