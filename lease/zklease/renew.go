package zklease

import (
	"context"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
)

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
