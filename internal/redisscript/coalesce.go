package redisscript

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// cleanupTimeout bounds the release of a grant whose caller gave up.
const cleanupTimeout = 5 * time.Second

// maxBatch bounds the calls of one pipeline.
const maxBatch = 128

// senders is how many calls or pipelines of one Locker are on the wire at
// once. One (the first version) kept a quiet machine's Redis and client
// waiting on each other: while a pipeline was out, every other call
// queued, the client idled, and each reply woke an idle CPU. Two keep one
// pipeline on the server while the next one forms (see docs/redis.md for
// the figures).
const senders = 2

// Coalescer sends the scripts of concurrent calls together, in one
// pipeline: one write and one read for the batch instead of one each per
// call, on the client and on the server. Every call is still one round
// trip and each script is still atomic; only the system calls are shared.
//
// A call goes at once, on its caller's goroutine, while fewer than
// senders are on the wire and none is queued (a single caller pays
// nothing). Otherwise it is queued; when a sender's reply comes back, the
// first queued caller is woken to send everything queued by then as the
// next pipeline (its own call first), so there is no goroutine of its own
// to hop through, nor to stop. A caller whose context ends while its call
// is queued returns at once; one whose context ends while its call is in
// flight returns at once too, and if its grant lands anyway, the sender
// releases it. A caller woken to send whose context has ended sends the
// others' calls, not its own, then returns.
type Coalescer struct {
	client redis.UniversalClient

	undone atomic.Int64 // grants released because their caller gave up

	mu     sync.Mutex
	active int // senders on the wire
	queue  []*call
}

// call is one queued script call.
type call struct {
	Call
	// undo is the lock and owner value of an acquire call, whose grant is
	// released if its caller gave up; empty for renew and release.
	undo  Grant
	state atomic.Int32 // pending, delivered, abandoned or leading
	cmd   *redis.Cmd
	ready chan struct{} // closed once cmd is set (delivered) or the caller is to send (leading)
}

const (
	pending int32 = iota
	delivered
	abandoned
	leading // woken to send the next pipeline
)

// NewCoalescer returns a Coalescer of calls to client (lease/redislease's
// one server, or one Redlock node). It owns no goroutine: nothing to stop.
func NewCoalescer(client redis.UniversalClient) *Coalescer {
	return &Coalescer{client: client}
}

// Grant is a lock and the owner value an acquire call may give it.
type Grant struct {
	Lock  Lock
	Value string
}

// Do runs c and returns its reply, or ctx's error when ctx ends first. undo
// is the grant an acquire call makes, to release if its caller gives up
// after it was sent; zero for other calls. Safe for concurrent use.
func (co *Coalescer) Do(ctx context.Context, c Call, undo Grant) (*redis.Cmd, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	co.mu.Lock()
	if co.active < senders && len(co.queue) == 0 {
		co.active++
		co.mu.Unlock()
		cmd := c.Run(ctx, co.client)
		co.next()
		return cmd, nil
	}
	q := &call{Call: c, undo: undo, ready: make(chan struct{})}
	co.queue = append(co.queue, q)
	co.mu.Unlock()
	select {
	case <-q.ready:
	case <-ctx.Done():
		if q.state.CompareAndSwap(pending, abandoned) {
			return nil, ctx.Err()
		}
		<-q.ready // delivered or leading meanwhile: closed at once
	}
	if q.state.Load() != leading {
		return q.cmd, nil
	}
	own := ctx.Err() == nil
	co.send(q, own)
	co.next()
	if !own {
		return nil, ctx.Err()
	}
	return q.cmd, nil
}

// Undone is the number of grants released because their caller had given
// up when they landed.
func (co *Coalescer) Undone() int64 { return co.undone.Load() }

// next hands the finished sender's place to the first queued caller that
// has not given up, or frees it when nobody is queued.
func (co *Coalescer) next() {
	co.mu.Lock()
	defer co.mu.Unlock()
	for len(co.queue) > 0 {
		q := co.queue[0]
		co.queue[0] = nil
		co.queue = co.queue[1:]
		if q.state.CompareAndSwap(pending, leading) {
			close(q.ready)
			return
		}
		// Abandoned before it was sent: nothing to do.
	}
	co.queue = nil // let the backing array go
	co.active--
}

// send sends leader's call (when own) and the queued calls as one
// pipeline, and delivers the replies.
func (co *Coalescer) send(leader *call, own bool) {
	co.mu.Lock()
	batch := make([]*call, 0, min(len(co.queue)+1, maxBatch))
	if own {
		batch = append(batch, leader)
	}
	n := 0
	for _, q := range co.queue {
		if len(batch) == maxBatch {
			break
		}
		n++
		if q.state.Load() == pending { // its caller has not given up
			batch = append(batch, q)
		}
	}
	clear(co.queue[:n])
	co.queue = co.queue[n:]
	co.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	calls := make([]Call, len(batch))
	for i, q := range batch {
		calls[i] = q.Call
	}
	// No caller's context: one caller giving up must not fail the others'
	// calls. go-redis bounds the round trip with its read timeout.
	var cmds []*redis.Cmd
	if len(calls) == 1 {
		cmds = []*redis.Cmd{calls[0].Run(context.Background(), co.client)}
	} else {
		cmds = RunAll(context.Background(), co.client, calls)
	}
	for i, q := range batch {
		q.cmd = cmds[i]
		if q == leader {
			continue
		}
		if q.state.CompareAndSwap(pending, delivered) {
			close(q.ready)
		} else if q.undo.Value != "" {
			co.release(q.undo, q.cmd)
		}
	}
}

// release deletes g if cmd, the reply of its acquire call, granted it: its
// caller gave up and will never release it.
func (co *Coalescer) release(g Grant, cmd *redis.Cmd) {
	if token, _, err := AcquireReply(cmd); err == nil && token > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_, _ = Release(ctx, co.client, g.Lock, g.Value, 0)
		co.undone.Add(1)
	}
}
