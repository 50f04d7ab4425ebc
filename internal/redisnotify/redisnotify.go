// Package redisnotify multiplexes the wake-ups of the Redis backends: one
// pub/sub connection per Hub, shared by every waiter of every key, with the
// fan-out to waiters done locally.
//
// A waiter of key K subscribes to K's channel (redisscript.Names.Channel),
// on which a release publishes. The Hub subscribes to a channel when its
// first local waiter arrives and waits for the server's confirmation, so a
// release that happens after Notify returns always reaches the waiter (while
// the connection lives). It keeps the subscription for a while after the
// last waiter leaves (an Acquire loop subscribes before every attempt, and
// a waiter woken by a release that loses the race comes straight back), and
// unsubscribes idle channels in the background.
//
// The Hub also wakes waiters when a lease they wait on expires: a failed
// acquire learns the holder's remaining TTL and tells the Hub (Expires),
// which wakes the key's waiters just after it. A lease that expires ends
// with no message, so without this a waiter would sleep through its backoff.
//
// Messages are lost while the connection is down (go-redis reconnects and
// resubscribes); a waiter then notices only through its polling backoff.
// When go-redis reports a resubscription, the Hub wakes every waiter, since
// a release may have been missed.
package redisnotify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Notify after Close.
var ErrClosed = errors.New("redisnotify: closed")

const (
	// confirmWait bounds the wait for a SUBSCRIBE confirmation; a waiter
	// that gives up still gets its channel and falls back on polling.
	confirmWait = 2 * time.Second
	// expiryMargin is added to a holder's remaining TTL before waking its
	// waiters: PTTL truncates to the millisecond, and the key is expired
	// only once the server's clock has passed its expiry.
	expiryMargin = time.Millisecond
)

// Hub is one pub/sub connection and the waiters it serves. The zero Hub is
// not usable; call New.
type Hub struct {
	open   func() *redis.PubSub
	linger time.Duration

	// subMu orders SUBSCRIBE and UNSUBSCRIBE on the wire with the creation
	// and deletion of entries, so a channel unsubscribed as idle and
	// subscribed again for a new waiter ends subscribed.
	subMu sync.Mutex

	mu      sync.Mutex
	ps      *redis.PubSub // nil until the first Notify
	closed  bool
	entries map[string]*entry // by channel
	pending []*entry          // unconfirmed SUBSCRIBEs, in the order they were sent
	nudge   chan struct{}     // the earliest expiry wake moved
	stop    chan struct{}     // closed by Close: the reader stops waiting
	done    chan struct{}     // closed when the loop has returned
}

type entry struct {
	waiters   map[chan struct{}]struct{}
	ready     chan struct{} // closed when the subscription is confirmed or failed
	confirmed bool
	err       error     // the server refused the SUBSCRIBE (set before ready closes)
	idle      time.Time // when the last waiter left; zero while waited on
	wakeAt    time.Time // wake the waiters then (a holder's expiry); zero: none
}

// New returns a Hub that opens its pub/sub connection with open (typically
// client.Subscribe with no channel) on the first Notify. linger is how long
// an idle channel stays subscribed.
func New(open func() *redis.PubSub, linger time.Duration) *Hub {
	return &Hub{
		open:    open,
		linger:  linger,
		entries: make(map[string]*entry),
		nudge:   make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
}

// Notify registers a waiter on channel and returns the channel it is woken
// on and the function that unregisters it. It returns once the server has
// confirmed the subscription (or after a bound, or when ctx ends: then with
// ctx's error). When the server refuses the SUBSCRIBE (a user without the
// permission), Notify returns that error as soon as it arrives. The wake
// channel is closed if the Hub closes.
func (h *Hub) Notify(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err // whatever else is ready, an ended context wins
	}
	wake := make(chan struct{}, 1)
	e, fresh, err := h.register(channel, wake)
	if err != nil {
		return nil, nil, err
	}
	stop := func() { h.unregister(channel, wake) }
	if fresh {
		h.mu.Lock()
		h.pending = append(h.pending, e)
		h.mu.Unlock()
		err := h.ps.Subscribe(ctx, channel)
		if err != nil {
			// go-redis keeps a channel it failed to subscribe in its list
			// (to resubscribe on reconnect); drop it, we forget it too.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = h.ps.Unsubscribe(uctx, channel)
			cancel()
		}
		h.subMu.Unlock()
		if err != nil {
			h.failed(channel, e)
			stop()
			return nil, nil, err
		}
	}
	timer := time.NewTimer(confirmWait)
	defer timer.Stop()
	select {
	case <-e.ready:
		if e.err != nil {
			stop()
			return nil, nil, e.err
		}
	case <-timer.C: // unconfirmed: the waiter polls, and a late message still wakes it
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
	return wake, stop, nil
}

// register adds wake to channel's entry. When it creates the entry (fresh),
// it returns with h.subMu held: the caller sends SUBSCRIBE, then unlocks.
func (h *Hub) register(channel string, wake chan struct{}) (e *entry, fresh bool, err error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, false, ErrClosed
	}
	if e = h.entries[channel]; e != nil && e.err == nil {
		e.waiters[wake] = struct{}{}
		e.idle = time.Time{}
		h.mu.Unlock()
		return e, false, nil
	}
	h.mu.Unlock()

	h.subMu.Lock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		h.subMu.Unlock()
		return nil, false, ErrClosed
	}
	h.startLocked()
	if e = h.entries[channel]; e == nil || e.err != nil {
		e = &entry{waiters: make(map[chan struct{}]struct{}), ready: make(chan struct{})}
		h.entries[channel] = e
		fresh = true
	}
	e.waiters[wake] = struct{}{}
	e.idle = time.Time{}
	if !fresh {
		h.subMu.Unlock()
	}
	return e, fresh, nil
}

// unregister removes wake from channel's entry; an entry left without
// waiters becomes idle and is unsubscribed by the loop after linger.
func (h *Hub) unregister(channel string, wake chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[channel]
	if e == nil {
		return
	}
	if _, ok := e.waiters[wake]; !ok {
		return
	}
	delete(e.waiters, wake)
	if len(e.waiters) == 0 {
		e.idle = time.Now()
		e.wakeAt = time.Time{}
	}
}

// failed forgets an entry whose SUBSCRIBE could not be sent, releasing the
// waiters that wait for its confirmation (they fall back on polling).
func (h *Hub) failed(channel string, e *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.entries[channel] == e {
		delete(h.entries, channel)
	}
	h.unpend(e)
	if !e.confirmed {
		e.confirmed = true
		close(e.ready)
	}
}

// startLocked opens the pub/sub connection and starts the loop that owns
// it. h.mu is held.
func (h *Hub) startLocked() {
	if h.ps != nil {
		return
	}
	h.ps = h.open()
	h.done = make(chan struct{})
	msgs := make(chan any, 256)
	go h.read(h.ps, msgs)
	go h.loop(msgs)
}

// healthCheck is how long the connection may stay silent before the reader
// sends a PING, and then how long the PING may go unanswered before the
// connection is taken for dead and replaced (go-redis resubscribes).
const healthCheck = 3 * time.Second

// read receives from the pub/sub connection and passes messages,
// confirmations and the server's error replies to the loop, until Close.
// It replaces go-redis's own channel, which drops error replies: a NOPERM
// answering a SUBSCRIBE must reach the waiter at once, not after
// confirmWait.
func (h *Hub) read(ps *redis.PubSub, out chan<- any) {
	defer close(out)
	pinged, failures := false, 0
	for {
		var (
			m   any
			err error
		)
		if pinged {
			// A timeout of Receive (not ReceiveTimeout) makes go-redis
			// replace the connection.
			ctx, cancel := context.WithTimeout(context.Background(), healthCheck)
			m, err = ps.Receive(ctx)
			cancel()
		} else {
			m, err = ps.ReceiveTimeout(context.Background(), healthCheck)
		}
		var rerr redis.Error
		var nerr net.Error
		switch {
		case errors.Is(err, redis.ErrClosed):
			return
		case err == nil:
			pinged, failures = false, 0
			if _, pong := m.(*redis.Pong); !pong {
				out <- m
			}
		case errors.As(err, &rerr):
			pinged, failures = false, 0
			out <- err
		case errors.As(err, &nerr) && nerr.Timeout() && !pinged:
			pinged = true
			_ = ps.Ping(context.Background()) // a failed write reconnects
		default:
			// The connection broke (go-redis reconnects on the next
			// Receive) or the server is down: wait a little, as go-redis's
			// channel does.
			pinged = false
			failures++
			select {
			case <-h.stop:
				return
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, time.Second)):
			}
		}
	}
}

// Expires tells the Hub that the lease its channel's waiters wait on
// expires in left: they are woken just after it. It does nothing when the
// channel has no waiter.
func (h *Hub) Expires(channel string, left time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[channel]
	if e == nil || len(e.waiters) == 0 {
		return
	}
	at := time.Now().Add(left + expiryMargin)
	if e.wakeAt.IsZero() || at.Before(e.wakeAt) {
		e.wakeAt = at
		select {
		case h.nudge <- struct{}{}:
		default:
		}
	}
}

// Close unsubscribes everything, closes the pub/sub connection and waits
// for the loop to return. Waiters' channels are closed (they fall back on
// polling). It does not close the Redis client. Close is idempotent.
func (h *Hub) Close() error {
	h.subMu.Lock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.subMu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	h.pending = nil
	for _, e := range h.entries {
		for w := range e.waiters {
			close(w)
		}
		if !e.confirmed {
			e.confirmed = true
			close(e.ready)
		}
	}
	clear(h.entries)
	ps, done := h.ps, h.done
	h.mu.Unlock()
	h.subMu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done // the loop drains the message channel until go-redis closes it
	return err
}

// loop is the one goroutine of a Hub: it fans messages out, fires expiry
// wakes and unsubscribes idle channels. It returns when go-redis closes
// msgs, after Close.
func (h *Hub) loop(msgs <-chan any) {
	defer close(h.done)
	sweep := time.NewTicker(h.linger)
	defer sweep.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return
			}
			h.handle(m)
		case <-sweep.C:
			h.sweep()
		case <-h.nudge:
			h.arm(timer)
		case <-timer.C:
			h.fire()
			h.arm(timer)
		}
	}
}

// handle fans a message out to the channel's waiters, marks a
// subscription confirmed, and fails a subscription the server refused.
func (h *Hub) handle(m any) {
	if err, ok := m.(error); ok {
		h.refused(err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m := m.(type) {
	case *redis.Message:
		if e := h.entries[m.Channel]; e != nil {
			wakeAll(e)
		}
	case *redis.Subscription:
		if m.Kind != "subscribe" {
			return
		}
		e := h.entries[m.Channel]
		if e == nil {
			return
		}
		if !e.confirmed {
			e.confirmed = true
			h.unpend(e)
			close(e.ready)
			return
		}
		// A second confirmation is go-redis resubscribing after a
		// reconnect: a release may have been published meanwhile.
		wakeAll(e)
	}
}

// refused handles an error reply on the connection. Replies come in the
// order of the commands, so a refused SUBSCRIBE is the oldest unconfirmed
// one; an error that is not a SUBSCRIBE's (a PING or UNSUBSCRIBE refused,
// say) fails no waiter. A refused channel is dropped from go-redis's list
// too, so that it does not resubscribe it after a reconnect.
func (h *Hub) refused(err error) {
	if s := err.Error(); !strings.Contains(s, "'subscribe'") && !strings.Contains(s, "channel") {
		return
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if len(h.pending) == 0 || h.closed {
		h.mu.Unlock()
		return
	}
	e := h.pending[0]
	h.pending = h.pending[1:]
	var channel string
	for c, x := range h.entries {
		if x == e {
			channel = c
			delete(h.entries, c)
		}
	}
	if !e.confirmed {
		e.confirmed = true
		e.err = fmt.Errorf("SUBSCRIBE %q refused: %w", channel, err)
		close(e.ready)
	}
	ps := h.ps
	h.mu.Unlock()
	if channel != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = ps.Unsubscribe(ctx, channel)
	}
}

// unpend removes e from the unconfirmed SUBSCRIBEs. h.mu is held.
func (h *Hub) unpend(e *entry) {
	for i, x := range h.pending {
		if x == e {
			h.pending = append(h.pending[:i], h.pending[i+1:]...)
			return
		}
	}
}

func wakeAll(e *entry) {
	for w := range e.waiters {
		select {
		case w <- struct{}{}:
		default: // already woken
		}
	}
}

// sweep unsubscribes channels idle for longer than linger.
func (h *Hub) sweep() {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	var idle []string
	now := time.Now()
	for c, e := range h.entries {
		if len(e.waiters) == 0 && !e.idle.IsZero() && now.Sub(e.idle) >= h.linger {
			idle = append(idle, c)
			delete(h.entries, c)
			h.unpend(e) // never confirmed: a late error is not its successor's
		}
	}
	ps := h.ps
	h.mu.Unlock()
	if len(idle) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// An error means the connection is down; go-redis has dropped the
		// channels from its list anyway and will not resubscribe them.
		_ = ps.Unsubscribe(ctx, idle...)
	}
}

// arm sets timer to the earliest expiry wake, if any.
func (h *Hub) arm(timer *time.Timer) {
	h.mu.Lock()
	var next time.Time
	for _, e := range h.entries {
		if !e.wakeAt.IsZero() && (next.IsZero() || e.wakeAt.Before(next)) {
			next = e.wakeAt
		}
	}
	h.mu.Unlock()
	timer.Stop()
	if !next.IsZero() {
		timer.Reset(max(time.Until(next), 0))
	}
}

// fire wakes the waiters whose holder's lease has expired.
func (h *Hub) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for _, e := range h.entries {
		if !e.wakeAt.IsZero() && !now.Before(e.wakeAt) {
			e.wakeAt = time.Time{}
			wakeAll(e)
		}
	}
}
