// Package zkboard is an elect.Board on ZooKeeper whose observers are
// pushed by a watch on the election's node.
//
// An election is the persistent node Config.Root + "/" + the election as
// one node name (internal/keypath). Its record is the ephemeral child
// "leader-" + the term token (the leader's node and since in its data),
// and "top" holds the greatest token ever published (a deposed leader is
// refused even after its successor's record is gone). A new term's Publish
// is one multi: "top" set (checked by version), the earlier record
// deleted, the new one created. Watchers watch the election node's
// children, so a record created or deleted wakes them and a refresh, which
// writes nothing, does not.
//
// Expiry, as zklease's leases: the publishing Board deletes its record
// itself TTL after its last Publish (a timer per election), and a
// process that dies or is cut off loses its record with its session, one
// session timeout after the ensemble last heard from it. Either deletion
// is pushed to the watchers; a crashed leader is therefore seen gone after
// the session timeout, not the TTL, when the two differ.
//
// go-zookeeper's requests take no context: ctx is checked before each
// request, and a request runs to its end (bounded by the connection's
// session timeout).
package zkboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

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
	// Root is the parent node of every election's node, created when
	// missing. Default "/aegis/elect". It starts with '/' and does not end
	// with one.
	Root string
}

// Board is the leader records of elections on ZooKeeper. It is safe for
// concurrent use. Close it to stop its expiry timers; the connection stays
// the caller's.
type Board struct {
	conn *zk.Conn
	root string

	mu     sync.Mutex
	closed bool
	timers map[string]*time.Timer // by record path: deletes it TTL after its last Publish
}

// New returns a Board on conn. A nil cfg means defaults. A nil conn or a
// bad Config.Root is an error wrapping aegis.ErrInvalid. New sends nothing
// to the ensemble.
func New(conn *zk.Conn, cfg *Config) (*Board, error) {
	if conn == nil {
		return nil, badinput.Errorf("zkboard: conn is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Root = cmp.Or(c.Root, "/aegis/elect")
	if !strings.HasPrefix(c.Root, "/") || strings.HasSuffix(c.Root, "/") || strings.Contains(c.Root, "//") {
		return nil, badinput.Errorf("zkboard: Config.Root %q is not a node path (it starts with '/', has no empty segment and does not end with '/')", c.Root)
	}
	return &Board{conn: conn, root: c.Root, timers: make(map[string]*time.Timer)}, nil
}

// Close stops the Board's expiry timers (its records then live as long as
// its session) and makes Publish fail. It does not close the connection.
// Close is idempotent.
func (b *Board) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for p, t := range b.timers {
		t.Stop()
		delete(b.timers, p)
	}
	return nil
}

const recordPrefix = "leader-"

func (b *Board) dir(election string) string { return b.root + "/" + keypath.Segment(election) }

func recordName(t aegis.Token) string { return recordPrefix + strconv.FormatInt(int64(t), 10) }

// data is a record's node data.
type data struct {
	Node    string `json:"node"`
	SinceUS int64  `json:"since_us"`
}

// ensure creates dir and its parents when missing.
func (b *Board) ensure(dir string) error {
	if ok, _, err := b.conn.Exists(dir); err != nil || ok {
		return err
	}
	at := ""
	for _, seg := range strings.Split(dir[1:], "/") {
		at += "/" + seg
		if _, err := b.conn.Create(at, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// Publish implements elect.Board: a refresh of the live term (its record
// created by this Board's session) re-arms the expiry timer and writes
// nothing; a new term is one multi. A token below 1 is an error wrapping
// aegis.ErrInvalid; a token below the greatest published, one wrapping
// aegis.ErrStale.
func (b *Board) Publish(ctx context.Context, election string, l elect.Leader, ttl time.Duration) error {
	if l.Token < 1 {
		return badinput.Errorf("zkboard: publish %q: token %d is not positive", election, l.Token)
	}
	dir := b.dir(election)
	rec := dir + "/" + recordName(l.Token)
	v, err := json.Marshal(data{Node: l.Node, SinceUS: l.Since.UnixMicro()})
	if err != nil {
		return fmt.Errorf("zkboard: publish %q: %w", election, err)
	}
	tok := []byte(strconv.FormatInt(int64(l.Token), 10))
	// A multi whose checks fail because another Board wrote meanwhile is
	// read again and retried, a few times.
	for range 5 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("zkboard: publish %q: %w", election, err)
		}
		if err := b.ensure(dir); err != nil {
			return fmt.Errorf("zkboard: publish %q: %w", election, err)
		}
		if _, err := b.conn.Sync("/"); err != nil { // read the leader's state, as Read does
			return fmt.Errorf("zkboard: publish %q: sync: %w", election, err)
		}
		top, topStat, err := b.conn.Get(dir + "/top")
		switch {
		case errors.Is(err, zk.ErrNoNode):
			topStat = nil // go-zookeeper returns a zero Stat with ErrNoNode
		case err != nil:
			return fmt.Errorf("zkboard: publish %q: %w", election, err)
		}
		if topStat != nil {
			if n, perr := strconv.ParseInt(string(top), 10, 64); perr == nil && n > int64(l.Token) {
				return fmt.Errorf("%w: election %q has had a token greater than %d", aegis.ErrStale, election, l.Token)
			}
		}
		ok, st, err := b.conn.Exists(rec)
		if err != nil {
			return fmt.Errorf("zkboard: publish %q: %w", election, err)
		}
		if ok && st.EphemeralOwner == b.conn.SessionID() {
			return b.arm(rec, ttl)
		}
		children, _, err := b.conn.Children(dir)
		if err != nil {
			return fmt.Errorf("zkboard: publish %q: %w", election, err)
		}
		var ops []any
		if topStat == nil {
			ops = append(ops, &zk.CreateRequest{Path: dir + "/top", Data: tok, Acl: zk.WorldACL(zk.PermAll)})
		} else {
			ops = append(ops, &zk.SetDataRequest{Path: dir + "/top", Data: tok, Version: topStat.Version})
		}
		for _, c := range children {
			if strings.HasPrefix(c, recordPrefix) {
				ops = append(ops, &zk.DeleteRequest{Path: dir + "/" + c, Version: -1})
			}
		}
		ops = append(ops, &zk.CreateRequest{Path: rec, Data: v, Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral})
		_, err = b.conn.Multi(ops...)
		switch {
		case err == nil:
			return b.arm(rec, ttl)
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrNoNode):
			continue // another Board wrote between the reads and the multi
		default:
			return fmt.Errorf("zkboard: publish %q: %w", election, err)
		}
	}
	return fmt.Errorf("zkboard: publish %q: other Boards wrote five times in a row between the reads and the write", election)
}

// arm (re)starts the timer that deletes the record rec ttl from now.
func (b *Board) arm(rec string, ttl time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("zkboard: the Board is closed")
	}
	if t := b.timers[rec]; t != nil {
		t.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(ttl, func() {
		b.mu.Lock()
		mine := b.timers[rec] == t
		if mine {
			delete(b.timers, rec)
		}
		b.mu.Unlock()
		if mine {
			_ = b.conn.Delete(rec, -1) // gone already, or the session ended: nothing left to do
		}
	})
	b.timers[rec] = t
	return nil
}

// Withdraw implements elect.Board: it deletes the term's record, named by
// its token, if it is still there (one request).
func (b *Board) Withdraw(ctx context.Context, election string, token aegis.Token) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zkboard: withdraw %q: %w", election, err)
	}
	rec := b.dir(election) + "/" + recordName(token)
	b.mu.Lock()
	if t := b.timers[rec]; t != nil {
		t.Stop()
		delete(b.timers, rec)
	}
	b.mu.Unlock()
	if err := b.conn.Delete(rec, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zkboard: withdraw %q: %w", election, err)
	}
	return nil
}

// Read implements elect.Board: the record with the greatest token among
// the election node's children (three requests). It syncs first: the
// server this session talks to may be a follower behind the leader, and a
// read there could miss a record another session published.
func (b *Board) Read(ctx context.Context, election string) (elect.Leader, error) {
	if err := ctx.Err(); err != nil {
		return elect.Leader{}, fmt.Errorf("zkboard: read %q: %w", election, err)
	}
	// A sync brings this session's server up to the leader's state as of
	// now, whatever its path ("/" always exists).
	if _, err := b.conn.Sync("/"); err != nil {
		return elect.Leader{}, fmt.Errorf("zkboard: read %q: sync: %w", election, err)
	}
	dir := b.dir(election)
	children, _, err := b.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return elect.Leader{}, nil
	}
	if err != nil {
		return elect.Leader{}, fmt.Errorf("zkboard: read %q: %w", election, err)
	}
	best := latestRecord(children)
	if best == 0 {
		return elect.Leader{}, nil
	}
	raw, _, err := b.conn.Get(dir + "/" + recordName(best))
	if errors.Is(err, zk.ErrNoNode) {
		return elect.Leader{}, nil // deleted since the listing
	}
	var l elect.Leader
	if err == nil {
		l, err = decodeData(raw, best)
	}
	if err != nil {
		return elect.Leader{}, fmt.Errorf("zkboard: read %q: %w", election, err)
	}
	return l, nil
}

// latestRecord returns the greatest token among the election node's
// children named as Publish names records (recordName: "leader-" and the
// token in decimal, positive, no sign or leading zero), 0 when none is.
// Another name ("leader-+7", "leader-07", "top") is no record: its token
// would name another node.
func latestRecord(children []string) aegis.Token {
	var best aegis.Token
	for _, c := range children {
		n, err := strconv.ParseInt(strings.TrimPrefix(c, recordPrefix), 10, 64)
		if err == nil && n > 0 && c == recordName(aegis.Token(n)) && aegis.Token(n) > best {
			best = aegis.Token(n)
		}
	}
	return best
}

// decodeData decodes a record's data as Publish writes it, the record of
// token.
func decodeData(raw []byte, token aegis.Token) (elect.Leader, error) {
	var d data
	if err := json.Unmarshal(raw, &d); err != nil {
		return elect.Leader{}, fmt.Errorf("the record of token %d is not a leader record: %w", token, err)
	}
	return elect.Leader{Node: d.Node, Token: token, Since: time.UnixMicro(d.SinceUS)}, nil
}

// Watch implements elect.Watcher: a watch on the election node's children,
// set again each time it fires (before the wake, so a change between the
// two is read by the woken observer). The channel is closed when ctx ends
// or the watch is lost (the session expired, the connection closed).
func (b *Board) Watch(ctx context.Context, election string) (<-chan struct{}, error) {
	dir := b.dir(election)
	if err := b.ensure(dir); err != nil {
		return nil, fmt.Errorf("zkboard: watch %q: %w", election, err)
	}
	_, _, ev, err := b.conn.ChildrenW(dir)
	if err != nil {
		return nil, fmt.Errorf("zkboard: watch %q: %w", election, err)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-ev:
				if !ok || e.Err != nil || e.Type == zk.EventNotWatching {
					return
				}
				if _, _, ev, err = b.conn.ChildrenW(dir); err != nil {
					return
				}
				select {
				case out <- struct{}{}:
				default: // a wake is pending: it covers this change too
				}
			}
		}
	}()
	return out, nil
}
