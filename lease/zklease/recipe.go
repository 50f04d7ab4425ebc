package zklease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis/internal/owner"
)

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
