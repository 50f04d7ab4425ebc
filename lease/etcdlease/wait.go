package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// errCampaignLost says that a waiting campaign's key is gone: its etcd lease
// expired while it waited (the client was cut off, or paused, past the
// TTL). Acquire queues again.
var errCampaignLost = errors.New("etcdlease: campaign lost its key while waiting")

// Acquire blocks until key is granted to this caller or ctx ends
// (aegis.Waiter). It queues in etcd: it puts its key at once, then waits for
// the deletion of the key created just before its own (a watch, not a poll;
// no herd: each waiter watches one key), keeping its own etcd lease alive
// meanwhile. Once no earlier key is left it checks that its key still
// exists and refreshes its lease before it returns, so a campaign that
// outlived its etcd lease never reports success: it queues again, behind
// whoever was granted the key meanwhile.
//
// When ctx ends it revokes its etcd lease (removing its place in the queue)
// and returns an error wrapping ctx.Err().
//
// Taking a place in the queue (the grant and the put) waits at most
// Config.RequestTimeout for the cluster when ctx has no deadline, as
// TryAcquire does: a cluster that cannot be reached is an error naming its
// endpoints, as aegis.Acquire promises. Once queued, a campaign waits through an outage
// until ctx ends: its place may expire meanwhile, and it queues again when
// the cluster answers.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if l.session {
		if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
			return nil, err
		}
		return l.sessionAcquire(ctx, key, ttl)
	}
	secs, err := l.wholeSeconds(ttl)
	if err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("etcdlease: acquire %q: %w", key, err)
		}
		lease, err := l.campaign(ctx, key, ttl, secs)
		if !errors.Is(err, errCampaignLost) {
			return lease, err
		}
	}
}

// campaign is one place in key's queue, from the put to the grant.
func (l *Locker) campaign(ctx context.Context, key string, ttl time.Duration, secs int64) (_ *aegis.Lease, err error) {
	start := time.Now()
	putCtx, cancel := l.bound(ctx)
	defer cancel()
	id, err := l.grantLease(putCtx, key, ttl, secs)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.revoke(ctx, id) // leave the queue
		}
	}()
	g := l.newGrant(key, id)
	resp, err := l.client.Txn(putCtx).
		If(clientv3.Compare(clientv3.CreateRevision(g.path), "=", 0)).
		Then(clientv3.OpPut(g.path, g.owner, clientv3.WithLease(id)),
			clientv3.OpGet(g.prefix, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		return nil, l.fail(putCtx, "acquire", key, err)
	}
	// Succeeded: both Then ops ran, so Responses has their two answers.
	if !resp.Succeeded || len(resp.Responses) < 2 { // a lease ID is never reused: this cannot happen
		return nil, fmt.Errorf("etcdlease: acquire %q: key %q exists already", key, g.path)
	}
	rev := resp.Header.Revision // our key's create revision: the token
	lease := &aegis.Lease{Key: key, Token: aegis.Token(rev), Owner: g.owner, TTL: ttl}
	if first := resp.Responses[1].GetResponseRange().GetKvs(); len(first) > 0 && first[0].CreateRevision == rev {
		lease.Deadline = driver.LocalDeadline(start, ttl)
		return lease, nil
	}
	for {
		pred, at, err := l.predecessor(ctx, key, g, rev)
		if err != nil {
			return nil, err
		}
		if pred == "" {
			break
		}
		if err := l.waitDelete(ctx, key, id, pred, at, ttl); err != nil {
			return nil, err
		}
	}
	// No earlier key is left and ours existed a moment ago. Refresh the
	// etcd lease: if that succeeds, it was alive all along, so our key was
	// never deleted (keys go with their lease), and the grant is ours.
	kaStart := time.Now()
	if err := l.keepAliveWaiting(ctx, key, id); err != nil {
		return nil, err
	}
	lease.Deadline = driver.LocalDeadline(kaStart, ttl)
	return lease, nil
}

// predecessor returns the key created just before rev under g's prefix
// ("" when there is none: g holds) and the revision of that answer. It
// fails with errCampaignLost when g's key no longer exists.
func (l *Locker) predecessor(ctx context.Context, key string, g grant, rev int64) (string, int64, error) {
	last := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))
	var resp *clientv3.TxnResponse
	err := retryRead(ctx, func() (err error) {
		resp, err = l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(g.path), "=", rev)).
			Then(clientv3.OpGet(g.prefix, last...)).
			Commit()
		return err
	})
	if err != nil {
		return "", 0, l.fail(ctx, "acquire", key, err)
	}
	if !resp.Succeeded || len(resp.Responses) == 0 {
		return "", 0, errCampaignLost
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return "", resp.Header.Revision, nil
	}
	return string(kvs[0].Key), resp.Header.Revision, nil
}

// waitDelete watches pred, from the revision after at, until it is deleted,
// the watch ends (the caller checks again), or ctx ends. Meanwhile it keeps
// the waiting etcd lease id alive every ttl/3 and fails with
// errCampaignLost when that lease is gone.
func (l *Locker) waitDelete(ctx context.Context, key string, id clientv3.LeaseID, pred string, at int64, ttl time.Duration) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	events := l.client.Watch(wctx, pred, clientv3.WithRev(at+1), clientv3.WithFilterPut())
	every := max(ttl/3, 100*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdlease: acquire %q: %w", key, ctx.Err())
		case resp, ok := <-events:
			if !ok || resp.Err() != nil || resp.Canceled {
				return nil // the caller looks again
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		case <-tick.C:
			kaCtx, kaCancel := context.WithTimeout(ctx, every)
			err := l.keepAliveWaiting(kaCtx, key, id)
			kaCancel()
			switch {
			case err == nil:
			case errors.Is(err, errCampaignLost):
				return err
			case ctx.Err() != nil:
				return fmt.Errorf("etcdlease: acquire %q: %w", key, ctx.Err())
			}
			// Another failure (the cluster unreachable): keep waiting. If
			// the lease expires meanwhile, the next keep-alive or the check
			// after the wait says so.
		}
	}
}

// keepAliveWaiting refreshes a waiting campaign's etcd lease, turning a
// missing lease into errCampaignLost.
func (l *Locker) keepAliveWaiting(ctx context.Context, key string, id clientv3.LeaseID) error {
	err := retryRead(ctx, func() error {
		_, err := l.client.KeepAliveOnce(ctx, id)
		return err
	})
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return errCampaignLost
	}
	if err != nil {
		return fmt.Errorf("etcdlease: acquire %q: keep waiting lease alive: %w", key, err)
	}
	return nil
}
