// Package etcdboard is an elect.Board on etcd whose observers are pushed by
// a watch on the record's key.
//
// An election's keys live under Config.Prefix + the election as one path
// segment (internal/keypath) + "/": "leader", the record, attached to an
// etcd lease of the term's TTL (rounded up to whole seconds, and at least
// the server's minimum), so that a crashed leader's record is deleted by
// etcd when the lease expires, and the deletion reaches the watchers like
// any change; and "top", the greatest token ever published (no lease: a
// deposed leader is refused even after its successor's record expired or
// was withdrawn). Publish of a new term is a transaction comparing "top";
// a refresh of the live term keeps its lease alive, writing no key, so it
// wakes no one.
//
// What it does not do: expire a record to the millisecond (etcd leases are
// whole seconds, and the server may keep an expired lease a little while
// it is busy, so a crashed leader is seen gone up to a second or so after
// its TTL).
package etcdboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/keypath"
)

var (
	_ elect.Board   = (*Board)(nil)
	_ elect.Watcher = (*Board)(nil)
)

// Config configures a Board. The zero value is valid.
type Config struct {
	// Prefix is the etcd key prefix of every record. Default
	// "aegis/elect/".
	Prefix string
}

// Board is the leader records of elections on etcd. It is safe for
// concurrent use. The client stays the caller's.
type Board struct {
	client *clientv3.Client
	prefix string
}

// New returns a Board on client. A nil cfg means defaults. A nil client is
// an error wrapping aegis.ErrInvalid. New sends nothing to the server.
func New(client *clientv3.Client, cfg *Config) (*Board, error) {
	if client == nil {
		return nil, badinput.Errorf("etcdboard: client is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	return &Board{client: client, prefix: cmp.Or(c.Prefix, "aegis/elect/")}, nil
}

func (b *Board) keys(election string) (leader, top string) {
	base := b.prefix + keypath.Segment(election) + "/"
	return base + "leader", base + "top"
}

// record is the leader key's value.
type record struct {
	Node    string `json:"node"`
	Token   int64  `json:"token"`
	SinceUS int64  `json:"since_us"`
}

// topValue is a token as "top" holds it: 20 digits, so that etcd's byte
// comparison orders tokens.
func topValue(t aegis.Token) string { return fmt.Sprintf("%020d", int64(t)) }

// Publish implements elect.Board: a refresh of the live term keeps its
// lease alive for the TTL the lease was granted with (two round trips, no
// write; a different ttl is not applied until the next term); a new term
// grants a lease and writes in one transaction (three round trips). A token below 1 is an
// error wrapping aegis.ErrInvalid; a token below the greatest published,
// one wrapping aegis.ErrStale.
func (b *Board) Publish(ctx context.Context, election string, l elect.Leader, ttl time.Duration) error {
	if l.Token < 1 {
		return badinput.Errorf("etcdboard: publish %q: token %d is not positive", election, l.Token)
	}
	leader, top := b.keys(election)
	if cur, lease, err := b.get(ctx, leader); err != nil {
		return fmt.Errorf("etcdboard: publish %q: %w", election, err)
	} else if cur.Token == l.Token && lease != 0 {
		_, err := b.client.KeepAliveOnce(ctx, lease)
		if err == nil {
			return nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcdboard: publish %q: keep the record alive: %w", election, err)
		}
		// The lease expired between the Get and now: write anew.
	}
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	g, err := b.client.Grant(ctx, secs)
	if err != nil {
		return fmt.Errorf("etcdboard: publish %q: grant: %w", election, err)
	}
	v, err := json.Marshal(record{Node: l.Node, Token: int64(l.Token), SinceUS: l.Since.UnixMicro()})
	if err != nil {
		return fmt.Errorf("etcdboard: publish %q: %w", election, err)
	}
	tok := topValue(l.Token)
	write := []clientv3.Op{clientv3.OpPut(top, tok), clientv3.OpPut(leader, string(v), clientv3.WithLease(g.ID))}
	// etcd fails a value comparison on a missing key, and has no "<=":
	// "top" absent is the outer condition; else "top" > token refuses.
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(top), "=", 0)).
		Then(write...).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(top), ">", tok)}, nil, write)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdboard: publish %q: %w", election, err)
	}
	if !resp.Succeeded && resp.Responses[0].GetResponseTxn().Succeeded {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = b.client.Revoke(rctx, g.ID) // unused; it would expire anyway
		cancel()
		return fmt.Errorf("%w: election %q has had a token greater than %d", aegis.ErrStale, election, l.Token)
	}
	return nil
}

// Withdraw implements elect.Board: it deletes the record if it is still
// the term's (two round trips).
func (b *Board) Withdraw(ctx context.Context, election string, token aegis.Token) error {
	leader, _ := b.keys(election)
	resp, err := b.client.Get(ctx, leader)
	if err != nil {
		return fmt.Errorf("etcdboard: withdraw %q: %w", election, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	if l, err := decodeRecord(resp.Kvs[0].Value); err != nil || l.Token != token {
		return nil // another term's record
	}
	_, err = b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(leader), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(leader)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdboard: withdraw %q: %w", election, err)
	}
	return nil
}

// Read implements elect.Board. One round trip.
func (b *Board) Read(ctx context.Context, election string) (elect.Leader, error) {
	leader, _ := b.keys(election)
	l, _, err := b.get(ctx, leader)
	if err != nil {
		return elect.Leader{}, fmt.Errorf("etcdboard: read %q: %w", election, err)
	}
	return l, nil
}

// get reads the record at key and its lease (zero when there is none).
func (b *Board) get(ctx context.Context, key string) (elect.Leader, clientv3.LeaseID, error) {
	resp, err := b.client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return elect.Leader{}, 0, err
	}
	l, err := decodeRecord(resp.Kvs[0].Value)
	if err != nil {
		return elect.Leader{}, 0, fmt.Errorf("the record at %s is not a leader record: %w", key, err)
	}
	return l, clientv3.LeaseID(resp.Kvs[0].Lease), nil
}

// decodeRecord decodes a leader record as Publish writes it: an error for
// one that is not JSON of a record or whose token is below 1 (no term has
// one: written past the Board).
func decodeRecord(v []byte) (elect.Leader, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return elect.Leader{}, err
	}
	if r.Token < 1 {
		return elect.Leader{}, fmt.Errorf("token %d is not positive", r.Token)
	}
	return elect.Leader{Node: r.Node, Token: aegis.Token(r.Token), Since: time.UnixMicro(r.SinceUS)}, nil
}

// watchCreate bounds the wait for etcd to create a watch.
const watchCreate = 10 * time.Second

// Watch implements elect.Watcher: a watch on the record's key, returned
// once etcd has created it (within 10s, or an error), so that every later change wakes the channel
// (a new term's record, a withdrawal, the deletion of an expired lease's
// record). The channel is closed when ctx ends or the watch fails (a
// compaction, the cluster without a leader); the observer then reads and
// watches again.
func (b *Board) Watch(ctx context.Context, election string) (<-chan struct{}, error) {
	leader, _ := b.keys(election)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := b.client.Watch(wctx, leader, clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok || resp.Err() != nil || !resp.Created {
			cancel()
			err := context.Cause(ctx)
			if ok && resp.Err() != nil {
				err = resp.Err()
			}
			if err == nil {
				err = errors.New("the watch ended before it was created")
			}
			return nil, fmt.Errorf("etcdboard: watch %q: %w", election, err)
		}
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("etcdboard: watch %q: %w", election, context.Cause(ctx))
	case <-time.After(watchCreate):
		cancel()
		return nil, fmt.Errorf("etcdboard: watch %q: not created within %s", election, watchCreate)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer cancel()
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				return
			}
			if len(resp.Events) > 0 {
				select {
				case out <- struct{}{}:
				default: // a wake is pending: it covers this change too
				}
			}
		}
	}()
	return out, nil
}
