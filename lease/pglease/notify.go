package pglease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errClosed is what Notify says once the Locker's pool refuses connections.
var errClosed = errors.New("pglease: notify: no connection for LISTEN")

// closeTimeout bounds the goodbye to the server of a listening connection.
const closeTimeout = time.Second

// listener is the LISTEN side of a Locker: one connection, taken from the
// pool while at least one waiter of this Locker is subscribed, whose
// notifications (the payload is the key) are fanned out to the waiters of
// each key. It lives only while someone waits, so a Locker needs no Close
// and leaves no goroutine behind. When the last waiter leaves, the
// connection stops listening (UNLISTEN) and goes back to the pool: a
// connection closed instead made the pool dial a new one, a few
// milliseconds of a backend's start, on the path of the next grant or
// release of a handoff between two callers.
type listener struct {
	pool    *pgxpool.Pool
	channel string // as an identifier, for LISTEN

	startMu sync.Mutex // serializes starting the connection

	mu      sync.Mutex
	run     *listening // nil while nobody waits
	waiters map[string]map[chan struct{}]struct{}
	count   int // subscribers of run
}

// listening is one connection and its goroutine.
type listening struct {
	pc     *pgxpool.Conn
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func newListener(pool *pgxpool.Pool, channel string) *listener {
	return &listener{pool: pool, channel: channel, waiters: make(map[string]map[chan struct{}]struct{})}
}

// Notify subscribes to key's wake-ups. When it returns, the connection
// listens, so a release committed later reaches the channel (while the
// connection lives: when it breaks, every subscriber's channel is closed).
func (n *listener) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	run, err := n.start(ctx)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.run != run {
		// The connection broke between start and here.
		n.mu.Unlock()
		close(ch)
		return ch, func() {}, nil
	}
	if n.waiters[key] == nil {
		n.waiters[key] = make(map[chan struct{}]struct{})
	}
	n.waiters[key][ch] = struct{}{}
	n.mu.Unlock()
	var once sync.Once
	return ch, func() { once.Do(func() { n.unsubscribe(run, key, ch) }) }, nil
}

// start returns the running connection, opening it when nobody listens,
// and counts one more subscriber of it.
func (n *listener) start(ctx context.Context) (*listening, error) {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	n.mu.Lock()
	if run := n.run; run != nil {
		n.count++
		n.mu.Unlock()
		return run, nil
	}
	n.mu.Unlock()

	pc, err := n.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errClosed, err)
	}
	// The connection stays out of the pool until the last waiter leaves;
	// it goes back only once UNLISTEN succeeded (see stop), so LISTEN never
	// leaks into a pooled query.
	conn := pc.Conn()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		discard(pc)
		return nil, fmt.Errorf("pglease: listen: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	run := &listening{pc: pc, conn: conn, cancel: cancel, done: make(chan struct{})}
	n.mu.Lock()
	n.run, n.count = run, 1
	n.mu.Unlock()
	go n.loop(loopCtx, run)
	return run, nil
}

// loop fans out notifications until the connection fails or is cancelled.
func (n *listener) loop(ctx context.Context, run *listening) {
	defer close(run.done)
	for {
		msg, err := run.conn.WaitForNotification(ctx)
		if err != nil && ctx.Err() != nil && !run.conn.IsClosed() {
			// The last waiter left (unsubscribe): the connection is sound.
			stop(run)
			return
		}
		if err != nil {
			n.mu.Lock()
			if n.run == run {
				// Broken under its waiters: they fall back to polling, and
				// the next Notify opens a new connection.
				n.run = nil
				for key, chans := range n.waiters {
					for ch := range chans {
						close(ch)
					}
					delete(n.waiters, key)
				}
			}
			n.mu.Unlock()
			discard(run.pc)
			return
		}
		n.mu.Lock()
		if n.run == run {
			for ch := range n.waiters[msg.Payload] {
				select {
				case ch <- struct{}{}:
				default: // already signalled
				}
			}
		}
		n.mu.Unlock()
	}
}

// unsubscribe removes a subscriber; the last one closes the connection and
// waits for its goroutine.
func (n *listener) unsubscribe(run *listening, key string, ch chan struct{}) {
	n.mu.Lock()
	if n.run != run {
		// The connection already broke and closed every channel.
		n.mu.Unlock()
		return
	}
	delete(n.waiters[key], ch)
	if len(n.waiters[key]) == 0 {
		delete(n.waiters, key)
	}
	n.count--
	last := n.count == 0
	if last {
		n.run = nil
	}
	n.mu.Unlock()
	if last {
		run.cancel()
		<-run.done
	}
}

// stop ends a sound listening connection: UNLISTEN, drop the notifications
// it buffered meanwhile, and back to the pool; a connection that fails
// UNLISTEN is closed instead.
func stop(run *listening) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if _, err := run.conn.Exec(ctx, "UNLISTEN *"); err != nil {
		discard(run.pc)
		return
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	for {
		// Buffered ones first; with a done context, nothing is read.
		if msg, _ := run.conn.WaitForNotification(done); msg == nil {
			break
		}
	}
	run.pc.Release()
}

// discard closes a connection taken from the pool and gives the pool back
// its slot.
func discard(pc *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = pc.Conn().Close(ctx)
	pc.Release() // a closed connection is destroyed, not pooled
}
