package redislease

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis/internal/redisscript"
)

// maxBatch bounds the calls of one pipeline.
const maxBatch = 128

// coalescer sends the scripts of concurrent calls together, in one
// pipeline: one write and one read for the batch instead of one each per
// call, on the client and on the server. Every call is still one round
// trip and each script is still atomic; only the system calls are shared.
//
// A call runs at once on its own when no other call is in flight (a single
// caller pays nothing). Otherwise it is queued, and the coalescer's one
// goroutine sends what is queued as a pipeline as soon as the previous
// pipeline has returned. A caller whose context ends while its call is
// queued or in flight returns at once; if its grant lands anyway, the
// goroutine releases it.
type coalescer struct {
	client   redis.UniversalClient
	inflight atomic.Int32

	undone atomic.Int64 // grants released because their caller gave up

	mu      sync.Mutex
	queue   []*call
	started bool
	closed  bool
	wake    chan struct{} // a call was queued
	quit    chan struct{} // Close
	done    chan struct{} // the goroutine returned
}

// call is one queued script call.
type call struct {
	redisscript.Call
	// undo is the lock and owner value of an acquire call, whose grant is
	// released if its caller gave up; empty for renew and release.
	undo  grant
	state atomic.Int32 // pending, delivered or abandoned
	cmd   *redis.Cmd
	ready chan struct{} // closed once cmd is set (delivered)
}

const (
	pending int32 = iota
	delivered
	abandoned
)

func newCoalescer(client redis.UniversalClient) *coalescer {
	return &coalescer{
		client: client,
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// grant is a lock and the owner value it may hold.
type grant struct {
	lock  redisscript.Lock
	value string
}

// do runs c and returns its reply, or ctx's error when ctx ends first.
// undo is the grant an acquire call makes, to release if its caller gives
// up after it was sent; zero for other calls.
func (co *coalescer) do(ctx context.Context, c redisscript.Call, undo grant) (*redis.Cmd, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := co.inflight.Add(1)
	defer co.inflight.Add(-1)
	if n == 1 {
		return c.Run(ctx, co.client), nil
	}
	q := &call{Call: c, undo: undo, ready: make(chan struct{})}
	if !co.enqueue(q) {
		return c.Run(ctx, co.client), nil // closed: run alone
	}
	select {
	case <-q.ready:
		return q.cmd, nil
	case <-ctx.Done():
		if q.state.CompareAndSwap(pending, abandoned) {
			return nil, ctx.Err()
		}
		<-q.ready // delivered meanwhile: the call took effect
		return q.cmd, nil
	}
}

// enqueue queues q and starts the goroutine on first use; false after
// Close.
func (co *coalescer) enqueue(q *call) bool {
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return false
	}
	co.queue = append(co.queue, q)
	if !co.started {
		co.started = true
		go co.loop()
	}
	co.mu.Unlock()
	select {
	case co.wake <- struct{}{}:
	default:
	}
	return true
}

// loop sends the queued calls, batch after batch, until Close; it empties
// the queue before it returns.
func (co *coalescer) loop() {
	defer close(co.done)
	for {
		var quit bool
		select {
		case <-co.wake:
		case <-co.quit:
			quit = true
		}
		for co.flush() {
		}
		if quit {
			return
		}
	}
}

// flush sends one batch of queued calls and delivers the replies; it
// reports whether there was anything to send.
func (co *coalescer) flush() bool {
	co.mu.Lock()
	n := min(len(co.queue), maxBatch)
	batch := make([]*call, 0, n)
	for _, q := range co.queue[:n] {
		if q.state.Load() == pending { // its caller has not given up
			batch = append(batch, q)
		}
	}
	co.queue = append(co.queue[:0], co.queue[n:]...)
	co.mu.Unlock()
	if n == 0 {
		return false
	}
	if len(batch) == 0 {
		return true
	}
	calls := make([]redisscript.Call, len(batch))
	for i, q := range batch {
		calls[i] = q.Call
	}
	// No caller's context: one caller giving up must not fail the others'
	// calls. go-redis bounds the round trip with its read timeout.
	cmds := redisscript.RunAll(context.Background(), co.client, calls)
	for i, q := range batch {
		q.cmd = cmds[i]
		if q.state.CompareAndSwap(pending, delivered) {
			close(q.ready)
		} else if q.undo.value != "" {
			co.release(q.undo, q.cmd)
		}
	}
	return true
}

// close stops the goroutine once it has sent what is queued, and waits for
// it. Later calls run alone.
func (co *coalescer) close() {
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return
	}
	co.closed = true
	started := co.started
	co.mu.Unlock()
	close(co.quit)
	if started {
		<-co.done
	}
}

// release deletes g if cmd, the reply of its acquire call, granted it: its
// caller gave up and will never release it.
func (co *coalescer) release(g grant, cmd *redis.Cmd) {
	if token, _, err := redisscript.AcquireReply(cmd); err == nil && token > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_, _ = redisscript.Release(ctx, co.client, g.lock, g.value, 0)
		co.undone.Add(1)
	}
}
