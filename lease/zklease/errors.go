package zklease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/reach"
)

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
