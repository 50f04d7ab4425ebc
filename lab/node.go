package lab

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/backend"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// NodeConfig is what one node process of a run needs. The lab passes it
// as the flags of `aegis node` (see [NodeMain]); the lease servers'
// addresses come from the AEGIS_* variables of the node's environment,
// which point at the lab's proxies.
type NodeConfig struct {
	Run      string
	Node     int    // from 1
	Strategy string // a Strategies name
	Fence    bool
	Tick     time.Duration
	Work     time.Duration
	TTL      time.Duration
	Ticks    int
	// Window is how long a tick stays due after it fires: a node keeps
	// trying a tick nobody has executed until its window ends.
	Window time.Duration
	// Skew is the node's clock offset, applied to every time the node
	// computes (tick fire times, tick deadlines, optimistic claims).
	Skew time.Duration
	// Store is the store of record: a PostgreSQL URL, or sqlite:PATH.
	Store string
	// Incarnation tells a restarted node's attempts from its earlier
	// life's.
	Incarnation int
}

// The events a node writes, one JSON object a line, on its standard output.
const (
	evReady    = "ready"    // connected; waiting for the start time on stdin
	evAcquired = "acquired" // holds the lease or claim for tick (token)
	evEnter    = "enter"    // about to read the balance: the attempt's invocation
	evEntered  = "entered"  // read the balance (value): in the critical section
	evWriting  = "writing"  // the work is done; the write begins
	evSkipped  = "skipped"  // the tick was already executed: nothing to do
	evStale    = "stale"    // the fence refused the attempt (detail: read or write)
	evExecuted = "executed" // committed balance value and the EXECUTED row
	evReleased = "released"
	evLost     = "lost"      // the lease had been lost when released
	evGaveUp   = "gave-up"   // the tick's window ended before it was executed
	evError    = "error"     // detail says what failed; the node retries
	evAbandon  = "abandoned" // the attempt ended without a commit (error past the window)
	evFinished = "finished"  // every tick done; the node exits
)

// nodeEvent is one line of a node's output.
type nodeEvent struct {
	Kind    string `json:"kind"`
	At      int64  `json:"at"` // Unix nanoseconds, real clock (not skewed)
	Tick    int    `json:"tick,omitempty"`
	Token   int64  `json:"token,omitempty"`
	Attempt string `json:"attempt,omitempty"`
	Value   *int64 `json:"value,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// startLine is what the lab writes on a node's standard input: when its
// first tick fires, in Unix nanoseconds of the real clock.
type startLine struct {
	Start int64 `json:"start"`
}

// NodeMain runs `aegis node` with args (the flags after "node"): a node of
// a lab run. It is started by the lab, not by hand. It returns the exit
// code.
func NodeMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("aegis node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c NodeConfig
	fs.StringVar(&c.Run, "run", "", "the run's id")
	fs.IntVar(&c.Node, "node", 0, "this node's number, from 1")
	fs.StringVar(&c.Strategy, "strategy", "", "the strategy")
	fs.BoolVar(&c.Fence, "fence", true, "write through the fence")
	fs.DurationVar(&c.Tick, "tick", time.Second, "the tick interval")
	fs.DurationVar(&c.Work, "work", 300*time.Millisecond, "the work in the critical section")
	fs.DurationVar(&c.TTL, "ttl", 2*time.Second, "the lease TTL")
	fs.IntVar(&c.Ticks, "ticks", 0, "how many ticks")
	fs.DurationVar(&c.Window, "window", 0, "how long a tick stays due")
	fs.DurationVar(&c.Skew, "skew", 0, "this node's clock offset")
	fs.StringVar(&c.Store, "store", "", "the store of record: a PostgreSQL URL or sqlite:PATH")
	fs.IntVar(&c.Incarnation, "incarnation", 1, "how many times this node was started")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "aegis node: %v\n", err)
		return 2
	}
	if err := RunNode(ctx, c, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "aegis node %d: %v\n", c.Node, err)
		return 1
	}
	return 0
}

// args returns the flags of `aegis node` for c.
func (c NodeConfig) args() []string {
	return []string{
		"--run", c.Run, fmt.Sprintf("--node=%d", c.Node), "--strategy", c.Strategy,
		fmt.Sprintf("--fence=%t", c.Fence), "--tick", c.Tick.String(), "--work", c.Work.String(),
		"--ttl", c.TTL.String(), fmt.Sprintf("--ticks=%d", c.Ticks), "--window", c.Window.String(),
		"--skew", c.Skew.String(), "--store", c.Store, fmt.Sprintf("--incarnation=%d", c.Incarnation),
	}
}

func (c NodeConfig) validate() error {
	if _, ok := LookupStrategy(c.Strategy); !ok {
		return invalid("unknown strategy %q", c.Strategy)
	}
	switch {
	case c.Run == "":
		return invalid("--run is required")
	case c.Node < 1:
		return invalid("--node %d: must be at least 1", c.Node)
	case c.Tick <= 0 || c.TTL <= 0 || c.Work < 0 || c.Window <= 0:
		return invalid("--tick, --ttl and --window must be positive, --work not negative")
	case c.Ticks < 1:
		return invalid("--ticks %d: must be at least 1", c.Ticks)
	case c.Store == "":
		return invalid("--store is required")
	}
	return nil
}

// node is a running node.
type node struct {
	c     NodeConfig
	strat Strategy
	db    *sql.DB
	out   *json.Encoder
	outMu sync.Mutex
	seq   int

	locker aegis.Locker // lease strategies
	// advisory is pg-advisory's dedicated connection (not pooled).
	advisory *pgx.Conn
	pgURL    string

	skew atomic.Int64 // nanoseconds; the lab can change it

	// writeFn is the critical section's write; nil means n.write. The
	// queue strategy's handler sets it for its job.
	writeFn func(ctx context.Context, tick int, token aegis.Token, attempt string, value int64, fenced bool) error

	fatal error // set when the node cannot go on

	lastErr   string
	lastErrAt time.Time
}

// RunNode runs one node: it connects, reports ready, reads the start time
// from stdin, then tries every tick's critical section under its
// strategy, writing its events to stdout. It returns when every tick is
// done, or when ctx ends or stdin is closed (the lab aborting the run).
func RunNode(ctx context.Context, c NodeConfig, stdin io.Reader, stdout io.Writer) error {
	strat, ok := LookupStrategy(c.Strategy)
	if !ok {
		return fmt.Errorf("unknown strategy %q", c.Strategy)
	}
	n := &node{c: c, strat: strat, out: json.NewEncoder(stdout)}
	var err error
	if path, ok := strings.CutPrefix(c.Store, "sqlite:"); ok {
		n.db, err = sqlitelease.Open(path)
	} else {
		n.pgURL = c.Store
		n.db, err = sql.Open("pgx", c.Store)
	}
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer n.db.Close()
	n.db.SetMaxOpenConns(4)

	if strat.Lease() {
		srv := backend.FromEnv()
		// A ZooKeeper session as long as the lease: a holder paused past
		// --ttl loses its session, and its lock goes to another node, as
		// the other backends' leases do (with backend's default minute, a
		// pause shorter than that only held everyone up).
		srv.ZKSessionTimeout = c.TTL
		l, closeFn, err := backend.Open(ctx, strat.Backend, srv)
		if err != nil {
			return fmt.Errorf("open the %s backend: %w", strat.Backend, err)
		}
		defer closeFn()
		n.locker = l
	}
	defer func() {
		if n.advisory != nil {
			_ = n.advisory.Close(context.WithoutCancel(ctx))
		}
	}()

	// The lab closes stdin to abort the run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := bufio.NewScanner(stdin)
	n.emit(nodeEvent{Kind: evReady})
	if !lines.Scan() {
		return errors.New("no start time on stdin")
	}
	var sl startLine
	if err := json.Unmarshal(lines.Bytes(), &sl); err != nil || sl.Start == 0 {
		return fmt.Errorf("bad start line %q", lines.Text())
	}
	n.skew.Store(int64(c.Skew))
	go func() {
		// Later lines change the node's clock; EOF aborts.
		for lines.Scan() {
			var cl controlLine
			if json.Unmarshal(lines.Bytes(), &cl) == nil && cl.Skew != nil {
				n.skew.Store(*cl.Skew)
			}
		}
		cancel()
	}()
	if loop := strategyLoops[c.Strategy]; loop != nil {
		loop(ctx, n, time.Unix(0, sl.Start))
		return n.fatal
	}
	n.run(ctx, time.Unix(0, sl.Start))
	return n.fatal
}

// strategyLoops are the node loops of strategies that do not go tick by
// tick through node.tick (the queue, whose workers take the ticks' jobs).
// A strategy's file registers its loop in init.
var strategyLoops = map[string]func(ctx context.Context, n *node, start time.Time){}

// storeSetups prepare the store of record for a strategy before its nodes
// start (the queue's tables), given the store's PostgreSQL URL.
var storeSetups = map[string]func(ctx context.Context, url string) error{}

// now is the node's clock: the real clock plus its skew.
func (n *node) now() time.Time { return time.Now().Add(time.Duration(n.skew.Load())) }

func (n *node) emit(e nodeEvent) {
	e.At = time.Now().UnixNano()
	n.outMu.Lock()
	defer n.outMu.Unlock()
	_ = n.out.Encode(e) // os.Stdout is unbuffered: a SIGKILL loses no line
}

// fail reports an error, at most once a second for the same message.
func (n *node) fail(tick int, what string, err error) {
	msg := what + ": " + err.Error()
	if msg == n.lastErr && time.Since(n.lastErrAt) < time.Second {
		return
	}
	n.lastErr, n.lastErrAt = msg, time.Now()
	n.emit(nodeEvent{Kind: evError, Tick: tick, Detail: msg})
}

// run processes the ticks in order. A restarted node begins with the
// first tick that has not fired yet by its clock: like a scheduler, it
// does not know what happened before it started.
func (n *node) run(ctx context.Context, start time.Time) {
	for tick := n.firstTick(start); tick <= n.c.Ticks; tick++ {
		fire := start.Add(time.Duration(tick-1) * n.c.Tick)
		if !sleep(ctx, fire.Sub(n.now())) {
			return
		}
		deadline := fire.Add(n.c.Window)
		tctx, cancel := context.WithTimeout(ctx, deadline.Sub(n.now()))
		done := n.tick(tctx, tick)
		cancel()
		if n.fatal != nil {
			n.emit(nodeEvent{Kind: evError, Tick: tick, Detail: n.fatal.Error()})
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !done {
			n.emit(nodeEvent{Kind: evGaveUp, Tick: tick})
		}
	}
	n.emit(nodeEvent{Kind: evFinished})
}

// firstTick is the node's first tick: 1, or for a restarted node the
// first that has not fired yet by its clock.
func (n *node) firstTick(start time.Time) int {
	if elapsed := n.now().Sub(start); elapsed > 0 && n.c.Incarnation > 1 {
		return int(elapsed/n.c.Tick) + 2
	}
	return 1
}

// tick tries tick under the strategy until it is executed (by this node
// or another) or ctx ends; it reports whether the tick is known done.
func (n *node) tick(ctx context.Context, tick int) bool {
	switch {
	case n.strat.Name == "none":
		return n.critical(ctx, tick, 0, false) == attemptCommitted
	case n.strat.Lease():
		return n.leaseTick(ctx, tick)
	case n.strat.Name == "pg-unique":
		return n.uniqueTick(ctx, tick)
	case n.strat.Name == "pg-advisory":
		return n.advisoryTick(ctx, tick)
	case n.strat.Name == "optimistic":
		return n.optimisticTick(ctx, tick)
	}
	n.fail(tick, "strategy", fmt.Errorf("%s is not available in this build", n.strat.Name))
	<-ctx.Done()
	return false
}

// retry is the delay between a node's attempts to enter a tick.
func retry() time.Duration { return 15*time.Millisecond + rand.N(20*time.Millisecond) }

func (n *node) leaseTick(ctx context.Context, tick int) bool {
	key := "aegis-lab/" + n.c.Run
	for ctx.Err() == nil {
		lease, err := aegis.Acquire(ctx, n.locker, key, n.c.TTL)
		if errors.Is(err, aegis.ErrInvalid) {
			// A TTL the backend refuses (etcd's minimum, ZooKeeper's
			// session): retrying cannot help.
			n.fatal = fmt.Errorf("acquire: %w", err)
			return false
		}
		if err != nil {
			if ctx.Err() == nil {
				n.fail(tick, "acquire", err)
				sleep(ctx, retry())
			}
			continue
		}
		n.emit(nodeEvent{Kind: evAcquired, Tick: tick, Token: int64(lease.Token)})
		// Keep renews the lease while the node works; a paused node does
		// not renew. The node does not look at the lease again before it
		// writes: a check just before the write leaves the same gap.
		held := aegis.Keep(context.WithoutCancel(ctx), n.locker, lease)
		res := n.critical(ctx, tick, lease.Token, true)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err = held.Release(rctx)
		cancel()
		switch {
		case err == nil:
			n.emit(nodeEvent{Kind: evReleased, Tick: tick, Token: int64(lease.Token)})
		case errors.Is(err, aegis.ErrLost):
			n.emit(nodeEvent{Kind: evLost, Tick: tick, Token: int64(lease.Token)})
		default:
			n.fail(tick, "release", err)
		}
		if res == attemptCommitted || res == attemptDone {
			return true
		}
		if res == attemptFailed {
			sleep(ctx, retry())
		}
	}
	return false
}

func (n *node) uniqueTick(ctx context.Context, tick int) bool {
	for ctx.Err() == nil {
		res, err := n.db.ExecContext(ctx, uniqueClaimSQL, n.c.Run, tick, n.c.Node, n.now().UnixMilli())
		if err != nil {
			if ctx.Err() == nil {
				n.fail(tick, "claim", err)
				sleep(ctx, retry())
			}
			continue
		}
		if rows, _ := res.RowsAffected(); rows == 0 {
			return true // another node's row: the constraint is the exclusion
		}
		n.emit(nodeEvent{Kind: evAcquired, Tick: tick})
		// The claim is committed and never retried: a winner that fails
		// leaves the tick undone (pg-unique without a reaper).
		n.critical(ctx, tick, 0, false)
		return true
	}
	return false
}

// advisoryKey is the run's advisory lock key.
func (n *node) advisoryKey() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("aegis-lab/" + n.c.Run))
	return int64(h.Sum64())
}

func (n *node) advisoryTick(ctx context.Context, tick int) bool {
	for ctx.Err() == nil {
		if n.advisory == nil || n.advisory.IsClosed() {
			conn, err := pgx.Connect(ctx, n.pgURL)
			if err != nil {
				if ctx.Err() == nil {
					n.fail(tick, "connect", err)
					sleep(ctx, retry())
				}
				continue
			}
			n.advisory = conn
		}
		var got bool
		if err := n.advisory.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", n.advisoryKey()).Scan(&got); err != nil {
			if ctx.Err() == nil {
				n.fail(tick, "pg_try_advisory_lock", err)
				_ = n.advisory.Close(context.WithoutCancel(ctx))
				sleep(ctx, retry())
			}
			continue
		}
		if !got {
			sleep(ctx, retry())
			continue
		}
		n.emit(nodeEvent{Kind: evAcquired, Tick: tick})
		res := n.critical(ctx, tick, 0, true)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if _, err := n.advisory.Exec(uctx, "SELECT pg_advisory_unlock($1)", n.advisoryKey()); err != nil {
			n.fail(tick, "pg_advisory_unlock", err)
			_ = n.advisory.Close(uctx)
		} else {
			n.emit(nodeEvent{Kind: evReleased, Tick: tick})
		}
		cancel()
		if res == attemptCommitted || res == attemptDone {
			return true
		}
	}
	return false
}

func (n *node) optimisticTick(ctx context.Context, tick int) bool {
	for ctx.Err() == nil {
		token, err := n.optimisticClaim(ctx, tick)
		switch {
		case errors.Is(err, errTickDone):
			return true
		case errors.Is(err, errClaimed):
			sleep(ctx, retry())
			continue
		case err != nil:
			if ctx.Err() == nil {
				n.fail(tick, "claim", err)
				sleep(ctx, retry())
			}
			continue
		}
		n.emit(nodeEvent{Kind: evAcquired, Tick: tick, Token: token})
		res := n.critical(ctx, tick, aegis.Token(token), true)
		if res == attemptCommitted || res == attemptDone {
			return true
		}
	}
	return false
}

var (
	errTickDone = errors.New("tick done")
	errClaimed  = errors.New("claimed by another node")
)

// optimisticClaim claims tick by compare-and-set on its version and
// returns the new version. A claim is stealable once its until_ms, set by
// the claimer's clock, is behind this node's clock.
func (n *node) optimisticClaim(ctx context.Context, tick int) (int64, error) {
	if _, err := n.db.ExecContext(ctx, optimisticRowSQL, n.c.Run, tick, n.now().UnixMilli()); err != nil {
		return 0, err
	}
	var version, until int64
	var state string
	if err := n.db.QueryRowContext(ctx, optimisticReadSQL, n.c.Run, tick).Scan(&version, &state, &until); err != nil {
		return 0, err
	}
	now := n.now()
	switch {
	case state == "DONE":
		return 0, errTickDone
	case state == "RUNNING" && now.UnixMilli() < until:
		return 0, errClaimed
	}
	res, err := n.db.ExecContext(ctx, optimisticClaimSQL, n.c.Run, tick, n.c.Node, version, now.Add(n.c.TTL).UnixMilli(), now.UnixMilli())
	if err != nil {
		return 0, err
	}
	if rows, _ := res.RowsAffected(); rows == 0 {
		return 0, errClaimed // another node's compare-and-set won
	}
	return version + 1, nil
}

// attemptResult is how one critical section ended.
type attemptResult int

const (
	attemptCommitted attemptResult = iota // this node's EXECUTED row committed
	attemptDone                           // the tick was already executed
	attemptStale                          // the fence refused it
	attemptFailed                         // an error; nothing committed
)

// critical runs the tick's critical section once: read the balance (and,
// fenced, present the token to the fence), work, then write balance + 1
// and the EXECUTED row in one transaction (fenced: through the fence).
// checkDone skips a tick that was already executed.
func (n *node) critical(ctx context.Context, tick int, token aegis.Token, checkDone bool) attemptResult {
	n.seq++
	attempt := fmt.Sprintf("%d.%d.%d", n.c.Node, n.c.Incarnation, n.seq)
	fenced := n.c.Fence && n.strat.Fenceable()
	ev := nodeEvent{Tick: tick, Token: int64(token), Attempt: attempt}
	e := ev
	e.Kind = evEnter
	n.emit(e)

	value, err := n.read(ctx, tick, token, checkDone, fenced)
	switch {
	case errors.Is(err, errTickDone):
		e = ev
		e.Kind = evSkipped
		n.emit(e)
		return attemptDone
	case isStale(err):
		e = ev
		e.Kind, e.Detail = evStale, "read"
		n.emit(e)
		n.audit(ctx, attempt, tick, token, "REFUSED", nil)
		return attemptStale
	case err != nil:
		n.fail(tick, "read", err)
		e = ev
		e.Kind, e.Detail = evAbandon, "read failed"
		n.emit(e)
		return attemptFailed
	}
	e = ev
	e.Kind, e.Value = evEntered, &value
	n.emit(e)

	sleep(ctx, n.c.Work) // the work; a pause here outlasts the lease

	e = ev
	e.Kind = evWriting
	n.emit(e)

	// The write is retried on errors (a partition, a restarted server)
	// until the tick's window ends, as a client with retries does.
	next := value + 1
	for {
		write := n.write
		if n.writeFn != nil {
			write = n.writeFn
		}
		err = write(context.WithoutCancel(ctx), tick, token, attempt, next, fenced)
		if err == nil || isUniqueViolation(err) { // a retry of a commit that landed
			e = ev
			e.Kind, e.Value = evExecuted, &next
			n.emit(e)
			return attemptCommitted
		}
		if isStale(err) {
			e = ev
			e.Kind, e.Detail = evStale, "write"
			n.emit(e)
			n.audit(ctx, attempt, tick, token, "REFUSED", nil)
			return attemptStale
		}
		n.fail(tick, "write", err)
		if errors.Is(err, errAbandon) || !sleep(ctx, retry()) {
			e = ev
			e.Kind, e.Detail = evAbandon, "write failed: "+err.Error()
			n.emit(e)
			return attemptFailed
		}
	}
}

// read is the critical section's first transaction. Fenced, it presents
// the token first: the fence's row lock waits for an older holder's write
// in flight, so that the check for an EXECUTED row and the read that follow
// (each a fresh snapshot under READ COMMITTED) see that write.
func (n *node) read(ctx context.Context, tick int, token aegis.Token, checkDone, fenced bool) (int64, error) {
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if fenced && n.strat.Token == LeaseToken {
		// Presenting the token when reading registers it: an older
		// holder's pending write can no longer land on what we read.
		if err := fence.CheckSQL(ctx, tx, balanceResource(n.c.Run), token); err != nil {
			return 0, err
		}
	}
	if checkDone {
		var executed int
		if err := tx.QueryRowContext(ctx, tickDoneSQL, n.c.Run, tick).Scan(&executed); err != nil {
			return 0, err
		}
		if executed > 0 {
			return 0, errTickDone
		}
	}
	var value int64
	if err := tx.QueryRowContext(ctx, readBalanceSQL, n.c.Run).Scan(&value); err != nil {
		return 0, err
	}
	return value, tx.Commit()
}

// write is the critical section's second transaction.
func (n *node) write(ctx context.Context, tick int, token aegis.Token, attempt string, value int64, fenced bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	switch {
	case fenced && n.strat.Token == LeaseToken:
		if err := fence.CheckSQL(ctx, tx, balanceResource(n.c.Run), token); err != nil {
			return err
		}
	case n.strat.Name == "optimistic" && fenced:
		if _, err := fence.ExecSQL(ctx, tx, optimisticDoneSQL, n.c.Run, tick, int64(token)); err != nil {
			return err
		}
	case n.strat.Name == "optimistic":
		if _, err := tx.ExecContext(ctx, optimisticDoneUnfencedSQL, n.c.Run, tick); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, writeBalanceSQL, n.c.Run, value); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, auditSQL, n.c.Run, attempt, tick, n.c.Node, int64(token), "EXECUTED", value, time.Now().UnixMilli()); err != nil {
		return err
	}
	return tx.Commit()
}

// audit records a refused attempt; it is informational (aegis inspect), so
// an error is only reported.
func (n *node) audit(ctx context.Context, attempt string, tick int, token aegis.Token, status string, value *int64) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := n.db.ExecContext(actx, auditSQL, n.c.Run, attempt, tick, n.c.Node, int64(token), status, value, time.Now().UnixMilli()); err != nil {
		n.fail(tick, "audit", err)
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
