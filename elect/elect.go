// Package elect is leader election over any aegis.Locker.
//
// Leadership is a lease on one key ("elect:" + the election's name), kept
// alive by aegis.Keep. A term is one grant of that lease, and its fencing
// token is the term token: every term's token is greater than every earlier
// term's, so the leader's writes can be fenced with it (package fence) and
// a deposed leader that was paused past its lease writes nothing.
//
//	e, err := elect.New(locker, "scheduler", &elect.Config{Node: "web-1"})
//	lead, err := e.Campaign(ctx) // blocks until this node leads
//	defer lead.Resign(ctx)
//	work(lead.Context(), lead.Token()) // cancelled when leadership is lost
//
// Guarantees: those of the Locker. On a store with a single authority
// (pglease, sqlitelease, etcdlease, zklease) at most one live term at a
// time; the term token increases. A leader whose renewal fails, or whose
// local deadline passes without one, sees Leadership.Context cancelled
// before the store can grant the next term (see aegis.Hold), unless it is
// paused: a paused leader resumes believing it leads until its next check,
// which is why writes carry the term token.
//
// What it does not do: decide anything about work. Elect a scheduler, let
// workers compete (package schedule's leader mode). Observers (Observe)
// learn of changes through a record the leader publishes on a Board, with a
// delay (see Observe); the record is advisory, the lease is the truth.
package elect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/node"
)

// keyPrefix namespaces election keys in a lease table shared with other
// users.
const keyPrefix = "elect:"

// MaxNameLen is the longest election name, in bytes.
const MaxNameLen = aegis.MaxKeyLen - len(keyPrefix)

// Config configures an Election. The zero value is valid.
type Config struct {
	// Node names this candidate in the leader record and in logs. Default
	// "HOSTNAME-PID". At most 100 bytes.
	Node string
	// TTL is the lease TTL of a term: a crashed leader is replaced after at
	// most about TTL. Default 10s.
	TTL time.Duration
	// Board is where the leader publishes its record, for Observe. Default
	// none: Observe then returns an error. See NewSQLBoard and packages
	// elect/redisboard, elect/etcdboard and elect/zkboard.
	Board Board
	// Poll is how often Observe reads the Board when nothing tells it to.
	// Default TTL/3 where the Board cannot push; where it can (a Watcher),
	// one minute, a safety net only (see Observe). At least 1ms.
	Poll time.Duration
	// Logger receives failures that do not end a call (a record that could
	// not be published, a store error while campaigning). Default: none.
	Logger *slog.Logger
}

// Election is one named election, seen from one candidate. It is safe for
// concurrent use; a candidate may campaign again after its term ends.
type Election struct {
	locker aegis.Locker
	name   string
	key    string
	cfg    Config
}

// New returns the election name on locker. A nil cfg means defaults. The
// error names the field that is wrong.
func New(locker aegis.Locker, name string, cfg *Config) (*Election, error) {
	if locker == nil {
		return nil, invalid("elect: locker is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Node = cmp.Or(c.Node, node.Default())
	c.TTL = cmp.Or(c.TTL, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case name == "":
		return nil, invalid("elect: name is empty")
	case len(name) > MaxNameLen:
		return nil, invalid("elect: name is %d bytes, at most %d are allowed", len(name), MaxNameLen)
	}
	if err := driver.CheckKey(keyPrefix + name); err != nil {
		return nil, invalid("elect: name: %w", err)
	}
	if err := node.Check("elect: Config.Node", c.Node); err != nil {
		return nil, invalid("%w", err)
	}
	if err := driver.CheckTTL(c.TTL, 0); err != nil {
		return nil, invalid("elect: Config.TTL: %w", err)
	}
	if c.TTL < 10*time.Millisecond {
		return nil, invalid("elect: Config.TTL %s is shorter than 10ms", c.TTL)
	}
	if c.Poll != 0 && c.Poll < time.Millisecond {
		return nil, invalid("elect: Config.Poll %s is shorter than 1ms", c.Poll)
	}
	return &Election{locker: locker, name: name, key: keyPrefix + name, cfg: c}, nil
}

// Name is the election's name.
func (e *Election) Name() string { return e.name }

// Node is this candidate's name.
func (e *Election) Node() string { return e.cfg.Node }

// retry spaces campaign attempts after a store error.
var retry = backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}

// Campaign blocks until this candidate leads or ctx ends, and returns the
// term. ctx also bounds the term: when it ends, leadership is resigned
// (like aegis.Hold). Call Resign to end the term earlier; it stops the
// term's goroutines.
//
// After the wait, Campaign verifies with the store that the grant still
// holds (one Renew round trip) and waits again if it does not: a grant
// that was delivered late (a long Waiter queue, a paused process) is never
// reported as leadership. A store error is logged and retried with
// backoff; bad input and the end of ctx are returned.
func (e *Election) Campaign(ctx context.Context) (*Leadership, error) {
	for attempt := 0; ; attempt++ {
		lease, err := aegis.Acquire(ctx, e.locker, e.key, e.cfg.TTL)
		if err == nil {
			// Verify: a grant is only leadership if it still holds now.
			err = e.locker.Renew(ctx, lease, e.cfg.TTL)
			if err == nil && time.Now().Before(lease.Deadline) {
				return e.begin(ctx, lease), nil
			}
			if err == nil || errors.Is(err, aegis.ErrLost) {
				e.cfg.Logger.Warn("elect: grant was stale when verified; campaigning again", "election", e.name, "token", lease.Token)
				continue
			}
		}
		if errors.Is(err, aegis.ErrInvalid) {
			return nil, fmt.Errorf("elect: campaign %q: %w", e.name, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("elect: campaign %q: %w", e.name, context.Cause(ctx))
		}
		e.cfg.Logger.Warn("elect: campaign failed; retrying", "election", e.name, "err", err)
		t := time.NewTimer(retry.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("elect: campaign %q: %w (last error: %v)", e.name, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

func (e *Election) begin(ctx context.Context, lease *aegis.Lease) *Leadership {
	held := aegis.Keep(ctx, e.locker, lease)
	l := &Leadership{
		e:     e,
		held:  held,
		since: time.Now(),
		done:  make(chan struct{}),
	}
	pctx, stop := context.WithCancel(held.Context())
	l.stop = stop
	if e.cfg.Board != nil {
		l.publish(pctx) // before Campaign returns: observers see it promptly
		go l.refresh(pctx)
	} else {
		close(l.done)
	}
	return l
}

// Leadership is one term of this candidate's leadership.
type Leadership struct {
	e     *Election
	held  *aegis.Held
	since time.Time
	stop  context.CancelFunc // ends the record's refresh
	done  chan struct{}      // closed when the refresh has returned

	once sync.Once
	err  error
}

// Context is cancelled when leadership is lost (a renewal failed or the
// local deadline passed; context.Cause wraps aegis.ErrLost), resigned, or
// when the context given to Campaign ends. Run the leader's work under it.
func (l *Leadership) Context() context.Context { return l.held.Context() }

// Token is the term token: greater than every earlier term's. Send it with
// every write the leader makes, through the fence.
func (l *Leadership) Token() aegis.Token { return l.held.Token() }

// Node is the leader's (this candidate's) name.
func (l *Leadership) Node() string { return l.e.cfg.Node }

// Since is when this term began, on this process's clock.
func (l *Leadership) Since() time.Time { return l.since }

// Err returns nil while leadership can be trusted, and otherwise why not;
// it reads the clock, so a process resumed after a pause sees the loss at
// once (see aegis.Held.Err).
func (l *Leadership) Err() error { return l.held.Err() }

// Resign ends the term: it withdraws the leader record and releases the
// lease, so another candidate is elected at once rather than after the TTL.
// It runs even when ctx is cancelled, with a short timeout of its own, and
// is idempotent. It returns aegis.ErrLost when leadership had been lost.
func (l *Leadership) Resign(ctx context.Context) error {
	l.once.Do(func() {
		l.stop()
		<-l.done
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if b := l.e.cfg.Board; b != nil {
			if err := b.Withdraw(cctx, l.e.name, l.Token()); err != nil {
				l.e.cfg.Logger.Warn("elect: withdraw the leader record", "election", l.e.name, "err", err)
			}
		}
		l.err = l.held.Release(cctx)
	})
	return l.err
}

// refresh republishes the record every TTL/3 while the term lasts, then
// withdraws it (fenced: a successor's record is left alone).
func (l *Leadership) refresh(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.e.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if l.held.Context().Err() != nil { // lost, or Campaign's ctx ended
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = l.e.cfg.Board.Withdraw(wctx, l.e.name, l.Token())
				cancel()
			}
			return
		case <-t.C:
			l.publish(ctx)
		}
	}
}

func (l *Leadership) publish(ctx context.Context) {
	rec := Leader{Node: l.e.cfg.Node, Token: l.Token(), Since: l.since}
	err := l.e.cfg.Board.Publish(ctx, l.e.name, rec, l.e.cfg.TTL)
	if err != nil && ctx.Err() == nil {
		l.e.cfg.Logger.Warn("elect: publish the leader record", "election", l.e.name, "token", rec.Token, "err", err)
	}
}

// Leader is a leader record: who leads, with which term token, since when.
// The zero Leader means no live leader.
type Leader struct {
	Node  string
	Token aegis.Token
	Since time.Time
}

// Observe returns a channel of leader changes, closed when ctx ends. The
// first value is the current leader (the zero Leader when there is none);
// then one value per change of leader or term. Observe needs Config.Board.
//
// Where the Board pushes (a Watcher: SQLBoard on PostgreSQL, packages
// elect/redisboard, elect/etcdboard and elect/zkboard), Observe reads the
// record when the Board says it changed: a new leader, or a resignation,
// is seen within a round trip or two. A crashed leader's record expires
// at most TTL after its last refresh; on etcd and ZooKeeper the expiry
// deletes it and is pushed, elsewhere nothing is sent, and Observe, which read the record's time left (an
// ExpiryReader), reads again then: the lag is the drift between the
// store's clock and this process's over a TTL. It also reads every
// Config.Poll (default one minute there), only as a safety net for a
// change made past the Board (a record edited by hand). While a watch is
// down (the connection lost), it reads every TTL/3 at most and watches
// again with backoff.
//
// Where the Board cannot push (SQLBoard on SQLite, or on PostgreSQL through
// a driver other than pgx), Observe says so in the log (Info) and polls
// every Config.Poll (default TTL/3): a new leader or a resignation is seen within
// Poll plus one round trip; a crashed leader at its record's expiry where
// the Board is an ExpiryReader (SQLBoard is), else within Poll of it. A
// read error is logged, the last value kept, and the read retried with
// backoff.
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if e.cfg.Board == nil {
		return nil, invalid("elect: Observe %q: Config.Board is not set", e.name)
	}
	ch := make(chan Leader)
	go e.observe(ctx, ch)
	return ch, nil
}

// safetyPoll is Observe's default Poll where the Board pushes.
const safetyPoll = time.Minute

// watchRetry spaces Watch calls after a failure (a connection refused) or
// a watch that ended soon after it began.
var watchRetry = backoff.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}

// expiryMargin is added to a record's time left before it is read again:
// the store sees it expired only once its clock has passed the expiry.
const expiryMargin = time.Millisecond

func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	defer close(ch)
	w, _ := e.cfg.Board.(Watcher)
	er, _ := e.cfg.Board.(ExpiryReader)
	var (
		wake       <-chan struct{} // nil while not watching
		watchSince time.Time       // when the current watch began
		watchFail  int             // failed or short-lived watches in a row
		watchAt    time.Time       // when to call Watch again, after a failure
		readFail   int             // failed reads in a row
		last       Leader
		first      = true
	)
	defer func() {
		if wake != nil {
			for range wake { // the watch ends with ctx: wait for its goroutine
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if w != nil && wake == nil && !time.Now().Before(watchAt) {
			// Watch before reading, so no change falls between the two.
			c, err := w.Watch(ctx, e.name)
			switch {
			case err == nil:
				wake, watchSince = c, time.Now()
			case ctx.Err() != nil:
				return
			case errors.Is(err, errors.ErrUnsupported):
				w = nil
				e.cfg.Logger.Info("elect: the Board cannot push; polling", "election", e.name, "poll", e.poll(false), "err", err)
			default:
				e.cfg.Logger.Warn("elect: watch the leader record; polling meanwhile", "election", e.name, "err", err)
				watchAt = time.Now().Add(watchRetry.Delay(watchFail))
				watchFail++
			}
		}
		var (
			cur  Leader
			left time.Duration
			err  error
		)
		if er != nil {
			cur, left, err = er.ReadExpiry(ctx, e.name)
		} else {
			cur, err = e.cfg.Board.Read(ctx, e.name)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			e.cfg.Logger.Warn("elect: read the leader record", "election", e.name, "err", err)
			readFail++
		case first || cur.Node != last.Node || cur.Token != last.Token:
			readFail = 0
			select {
			case ch <- cur:
			case <-ctx.Done():
				return
			}
			last, first = cur, false
		default:
			readFail = 0
		}

		// The next read: at Poll, or sooner when the record expires, a
		// read failed, or the watch is down.
		next := e.poll(w != nil)
		if w != nil && wake == nil {
			next = min(next, e.cfg.TTL/3, max(time.Until(watchAt), 0))
		}
		if readFail > 0 {
			next = min(next, retry.Delay(readFail-1))
		}
		if cur.Token != 0 && left > 0 {
			next = min(next, left+expiryMargin)
		}
		timer.Reset(next) // since Go 1.23, Reset drops a value not received
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				// Lost: read at once (a change may have been missed), and
				// watch again, at once after a watch that lasted, with
				// backoff after one that ended soon (no spinning on a
				// server that drops every listener).
				wake = nil
				if time.Since(watchSince) > watchRetry.Max {
					watchFail, watchAt = 0, time.Time{}
				} else {
					watchAt = time.Now().Add(watchRetry.Delay(watchFail))
					watchFail++
				}
			}
		case <-timer.C:
		}
	}
}

// poll is how long Observe waits between reads when nothing wakes it.
func (e *Election) poll(pushed bool) time.Duration {
	switch {
	case e.cfg.Poll != 0:
		return e.cfg.Poll
	case pushed:
		return safetyPoll
	default:
		return e.cfg.TTL / 3
	}
}
