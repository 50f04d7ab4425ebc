package zklease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// sessNow returns the connection's session, the session timeout and a
// channel closed at the next session event.
func (l *Locker) sessNow() (int64, time.Duration, <-chan struct{}) {
	timeout, changed := l.sess.now()
	return l.conn.SessionID(), timeout, changed
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
