package zklease

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// Acquire blocks until key is granted to this caller or ctx ends
// (aegis.Waiter). It queues in ZooKeeper: it creates its node at once, then
// watches only the node just before its own (no herd effect) and looks
// again when that one goes. Before it reports success it checks through the
// leader that its node still exists on the connection's current session: a
// campaign whose session expired while it waited queues again with a new
// node instead of reporting a grant it no longer has.
//
// When ctx ends it deletes its node (leaving the queue) and returns an
// error wrapping ctx.Err().
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := l.checkTTL(ttl); err != nil {
		return nil, err
	}
	for {
		_, _, changed := l.sessNow()
		timeout, err := l.ready(ctx)
		if err != nil {
			return nil, l.fail("acquire", key, err)
		}
		if err := l.fits(ttl, timeout); err != nil {
			return nil, err
		}
		lease, err := l.campaign(ctx, key, ttl, timeout)
		switch {
		case errors.Is(err, errCampaignLost):
		case transient(err):
			// The connection dropped under the campaign (a create whose
			// answer was lost, a session that expired while cut off): its
			// node, if any, is being deleted; a waiter queues again once
			// the connection is back, it does not give up.
			if err := l.waitEvent(ctx, changed); err != nil {
				return nil, l.fail("acquire", key, err)
			}
		default:
			return lease, err
		}
	}
}

// errCampaignLost says that a waiting campaign's node is gone (its session
// expired): Acquire queues again.
var errCampaignLost = errors.New("zklease: campaign lost its node while waiting")

// campaign is one place in key's queue, from the create to the grant.
func (l *Locker) campaign(ctx context.Context, key string, ttl, timeout time.Duration) (_ *aegis.Lease, err error) {
	start := time.Now()
	n, err := call(l, ctx, func() (node, error) { return l.create(key) }, l.drop)
	if err != nil {
		return nil, l.fail("acquire", key, err)
	}
	defer func() {
		if err != nil {
			l.drop(n) // leave the queue, even when ctx ended
		}
	}()
	if n.known() {
		// The lone child, as the leader ordered the create: granted.
		return l.hold(ctx, key, n, start, ttl, timeout)
	}
	for checked := false; !checked; {
		start = time.Now()
		err := l.settle(ctx, &n)
		if err == nil && !n.first() {
			if n.predecessor() == "" { // not among its siblings: the session ended
				return nil, errCampaignLost
			}
			if err := l.waitFor(ctx, n); err != nil {
				return nil, l.fail("acquire", key, err)
			}
			continue
		}
		if err == nil {
			// First, as a server may have told us: confirm through the
			// leader that the node (so the session) is still there.
			err = l.retryOn(ctx, n.session, func() error {
				res, err := l.conn.Multi(&zk.CheckVersionRequest{Path: n.path, Version: n.stat.Version})
				return multiErr(res, err)
			})
			checked = err == nil
		}
		switch {
		case errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrSessionExpired):
			return nil, errCampaignLost
		case err != nil:
			return nil, l.fail("acquire", key, err)
		}
	}
	return l.hold(ctx, key, n, start, ttl, timeout)
}

// waitFor waits until n's predecessor is deleted (or was already), the
// session changes, or ctx ends.
func (l *Locker) waitFor(ctx context.Context, n node) error {
	pred := n.path[:len(n.path)-len(n.name)] + n.predecessor()
	type watch struct {
		exists bool
		ch     <-chan zk.Event
	}
	_, _, changed := l.sessNow()
	w, err := call(l, ctx, func() (watch, error) {
		exists, _, ch, err := l.conn.ExistsW(pred)
		return watch{exists, ch}, err
	}, nil)
	if transient(err) {
		return l.waitEvent(ctx, changed)
	}
	if err != nil || !w.exists {
		return err
	}
	select {
	case <-w.ch: // deleted, or the watch ended with the connection: look again
		return nil
	case <-changed: // a session event: look again
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stop:
		return errClosed
	}
}

func (l *Locker) waitEvent(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stop:
		return errClosed
	}
}
