package node

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// A node of a run is a process of the aegis executable (`aegis node`): a
// replica of the lab's Task Scheduler. Its scheduler (package schedule,
// in the strategy's mode) binds the run's catalog of schedules, and each
// tick it runs becomes the job's critical section (critical.go). The node
// reports every step as a JSON line on its standard output (protocol.go).

// NodeMain runs `aegis node` with args (the flags after "node"): a node of
// a lab run. It is started by the lab, not by hand. It returns the exit
// code.
func NodeMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := lab.ParseNodeArgs(args, stderr)
	if err != nil {
		return lab.NodeExitConfig
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "aegis node: %v\n", err)
		return lab.NodeExitConfig
	}
	if err := runNode(ctx, c, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "aegis node %d: %v\n", c.Node, err)
		if errors.Is(err, aegis.ErrInvalid) { // its backend refused the configuration
			return lab.NodeExitConfig
		}
		return 1
	}
	return 0
}

// node is a running node.
type node struct {
	c     lab.NodeConfig
	strat lab.Strategy
	db    *sql.DB
	ns    string
	out   *json.Encoder
	outMu sync.Mutex
	seq   atomic.Int64
	clock *nodeClock
	// fatal receives an error the node cannot go on after (a TTL its
	// backend refuses): retrying each tick would only repeat it.
	fatal chan error
	// untils is when each run's lease or run row expires on its store
	// (Unix ns, from the scheduler's EventRun), until its handler starts.
	untilMu sync.Mutex
	untils  map[runID]int64
	// grants reads a key's grants from the store's grant history, the
	// newest first (nil: the strategy's store keeps none).
	grants func(ctx context.Context, key string, limit int) ([]pglease.Grant, error)
	// start is when the run's first tick fires (Unix ns; 0 until the lab
	// says): the handler runs only the ticks fired in [start, end).
	start atomic.Int64
}

// runNode runs one node: it connects, reports ready, reads the start time
// from stdin, runs the catalog's ticks under its strategy until the run's
// last window has closed, writing its events to stdout. It returns then,
// or when ctx ends or stdin is closed (the lab aborting the run).
func runNode(ctx context.Context, c lab.NodeConfig, stdin io.Reader, stdout io.Writer) error {
	strat, ok := lab.LookupStrategy(c.Strategy)
	if !ok {
		return fmt.Errorf("unknown strategy %q", c.Strategy)
	}
	n := &node{c: c, strat: strat, ns: lab.Namespace(c.Run), out: json.NewEncoder(stdout), clock: &nodeClock{}, fatal: make(chan error, 1), untils: map[runID]int64{}}
	phases := newPhases()
	var err error
	if n.db, err = openStore(c.Store); err != nil {
		return err
	}
	defer n.db.Close()
	n.clock.skew.Store(int64(c.Skew))
	phases.mark("store")

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sched, startMode, closeMode, err := n.scheduler(ctx)
	if err != nil {
		return err
	}
	defer closeMode()
	if m := sched.Mode(); m != n.strat.Mode {
		return fmt.Errorf("strategy %s runs in %s mode, and its scheduler is in %s mode", n.strat.Name, n.strat.Mode, m)
	}
	phases.mark("scheduler")
	if err := sched.Handle(lab.LabHandler, n.handle); err != nil {
		return err
	}

	// Started before the start time, so that its binder has the catalog's
	// timers set when the first tick fires; ticks before it do nothing.
	if err := sched.Start(ctx); err != nil {
		return fmt.Errorf("start the scheduler: %w", err)
	}
	stop := sync.OnceFunc(sched.Stop)
	defer stop()
	if err := startMode(ctx); err != nil {
		return fmt.Errorf("start the %s mode: %w", n.strat.Mode, err)
	}
	phases.mark("started")
	if err := n.awaitBound(ctx, sched); err != nil {
		return err
	}

	phases.mark("catalog bound")
	lines := bufio.NewScanner(stdin)
	n.emit(lab.NodeEvent{Kind: lab.EvReady, Detail: phases.String()})
	start, err := n.readStart(lines)
	if err != nil {
		return err
	}
	n.start.Store(start)
	go n.follow(lines, cancel)
	// The last tick's write may go on for a window after it fired.
	end := time.Unix(0, start).Add(time.Duration(c.Ticks) * c.Tick)
	wait := time.NewTimer(time.Until(end.Add(c.Window)))
	defer wait.Stop()
	done := false
	select {
	case <-wait.C:
		done = true
	case <-ctx.Done():
	case err := <-n.fatal:
		stop()
		return err
	}
	stop()
	if done {
		n.emit(lab.NodeEvent{Kind: lab.EvFinished})
	}
	return nil
}

// follow reads the control lines after the start: a line changes the
// node's clock; the end of stdin (the lab aborting the run) cancels.
func (n *node) follow(lines *bufio.Scanner, cancel context.CancelFunc) {
	for lines.Scan() {
		var cl lab.ControlLine
		if json.Unmarshal(lines.Bytes(), &cl) == nil && cl.Skew != nil {
			n.clock.skew.Store(*cl.Skew)
		}
	}
	cancel()
}

// openStore opens the run's store: a SQLite file (sqlite:PATH) or a
// PostgreSQL DSN.
func openStore(store string) (*sql.DB, error) {
	var db *sql.DB
	var err error
	if path, ok := strings.CutPrefix(store, "sqlite:"); ok {
		db, err = sqlitelease.Open(path)
	} else {
		db, err = sql.Open("pgx", store)
	}
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	// As many kept idle as may be open: the default of 2 closed and
	// reopened connections all run long, at tens of milliseconds of the
	// server's CPU each.
	db.SetMaxOpenConns(6)
	db.SetMaxIdleConns(6)
	return db, nil
}

// awaitBound waits until the scheduler has bound the catalog. Ready
// means that: a node starved at its start would otherwise set its timers
// after the first ticks had fired.
func (n *node) awaitBound(ctx context.Context, sched *schedule.Scheduler) error {
	select {
	case <-sched.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case err := <-n.fatal:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("the scheduler did not read the catalog within 30s")
	}
}

// readStart reads control lines until the start time (Unix ns),
// answering the lab's pings on the way.
func (n *node) readStart(lines *bufio.Scanner) (int64, error) {
	var start int64
	for start == 0 {
		if !lines.Scan() {
			return 0, errors.New("no start time on stdin")
		}
		var cl lab.ControlLine
		if err := json.Unmarshal(lines.Bytes(), &cl); err != nil || cl.Ping == 0 && cl.Start == 0 {
			return 0, fmt.Errorf("bad control line %q before the start", lines.Text())
		}
		if cl.Ping != 0 {
			n.emit(lab.NodeEvent{Kind: lab.EvPong, Ping: cl.Ping})
		}
		start = cl.Start
	}
	return start, nil
}

// scheduler returns the node's scheduler in its strategy's mode, what
// starts the mode's parts after the scheduler (leader mode's workers), and
// what closes them after it stopped.
func (n *node) scheduler(ctx context.Context) (*schedule.Scheduler, func(context.Context) error, func(), error) {
	cat, err := schedule.NewCatalog(ctx, n.db, &schedule.CatalogConfig{Namespace: n.ns})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open the catalog: %w", err)
	}
	cfg := &schedule.Config{
		Node:    fmt.Sprintf("node%d.%d", n.c.Node, n.c.Incarnation),
		Catalog: cat, Clock: n.clock, OnEvent: n.onSchedule,
		ReapInterval: max(n.c.TTL/4, 10*time.Millisecond),
		Logger:       nodeLogger(),
	}
	nothing := func(context.Context) error { return nil }
	closeFn := func() {}
	switch n.strat.Mode {
	case schedule.ModeRunKey:
		cfg.Store, err = schedule.NewStore(ctx, n.db, &schedule.StoreConfig{Namespace: n.ns})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("open the run table: %w", err)
		}
	case schedule.ModeLease:
		l, c, err := n.openLocker(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg.Locker, closeFn = l, c
	case schedule.ModeLeader:
		return n.leaderScheduler(ctx, cfg)
	}
	s, err := schedule.New(cfg)
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	return s, nothing, closeFn, nil
}

// nodeLogger logs to the node's log file (its standard error): warnings,
// and with AEGIS_LAB_DEBUG=1 every scheduler event.
func nodeLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("AEGIS_LAB_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// onSchedule turns the scheduler's events the lab shows into node events.
func (n *node) onSchedule(e schedule.Event) {
	switch e.Kind {
	case schedule.EventError:
		n.emit(lab.NodeEvent{Kind: lab.EvError, Job: e.Job, Tick: n.tickOf(e.Fire), Detail: "schedule: " + errText(e)})
		if errors.Is(e.Err, aegis.ErrInvalid) {
			select {
			case n.fatal <- fmt.Errorf("%s: %w", e.Job, e.Err):
			default:
			}
		}
	case schedule.EventUnhandled:
		n.emit(lab.NodeEvent{Kind: lab.EvError, Job: e.Job, Detail: "schedule: " + string(e.Kind) + ": " + errText(e)})
	case schedule.EventNotPrimary:
		if t := n.tickOf(e.Fire); t > 0 {
			n.emit(lab.NodeEvent{Kind: lab.EvNotPrimary, Job: e.Job, Tick: t, Detail: e.Reason})
		}
	case schedule.EventReclaim:
		n.emit(lab.NodeEvent{Kind: lab.EvReclaim, Job: e.Job, Tick: n.tickOf(e.Fire), Token: int64(e.Token), Detail: e.Reason})
	case schedule.EventElected:
		n.emit(lab.NodeEvent{Kind: lab.EvElected, Token: int64(e.Token)})
	case schedule.EventRun:
		if n.expires() && !e.Until.IsZero() {
			n.untilMu.Lock()
			n.untils[runID{e.Job, e.Fire.UnixNano(), e.Token}] = e.Until.UnixNano()
			n.untilMu.Unlock()
		}
	case schedule.EventRenewed:
		if t := n.tickOf(e.Fire); t > 0 && n.expires() {
			token := e.Token
			if !n.strat.Fenceable() {
				token = 0
			}
			n.emit(lab.NodeEvent{Kind: lab.EvRenewed, Job: e.Job, Tick: t, Token: int64(token), RunAttempt: e.Attempt, Until: e.Until.UnixNano()})
		}
	case schedule.EventSkipped:
		// A tick this node could not start because its previous run of
		// the job still goes (overlap forbid, the lab's policy: a run that
		// overran its tick, on a loaded machine) misfired, as Quartz calls
		// a fire a DisallowConcurrentExecution job could not take. The
		// other skips (another node has the tick, the lease is held) are
		// the coordination working and are not reported.
		if t := n.tickOf(e.Fire); t > 0 && strings.HasPrefix(e.Reason, "overlap forbid") {
			n.emit(lab.NodeEvent{Kind: lab.EvMisfired, Job: e.Job, Tick: t, Token: int64(e.Token), Detail: e.Reason})
		}
	case schedule.EventRefused, schedule.EventMisfired, schedule.EventLost:
		if t := n.tickOf(e.Fire); t > 0 {
			ev := lab.NodeEvent{Kind: string(e.Kind), Job: e.Job, Tick: t, Token: int64(e.Token), Detail: cmpOr(e.Reason, errText(e))}
			if e.Kind == schedule.EventMisfired {
				// Past its starting deadline: the node (its timer, or the
				// store's answer) was this late.
				ev.Late = int64(n.clock.Now().Sub(e.Fire))
			}
			n.emit(ev)
		}
	}
}

// runID names one run of a job on this node.
type runID struct {
	job   string
	fire  int64
	token aegis.Token
}

// expires reports whether the strategy's runs hold something that expires
// on a store unless renewed: a lease or a run row. Not none's grant-all
// Locker nor pg-advisory's lock, which is held as long as its connection.
func (n *node) expires() bool {
	return n.strat.Mode != schedule.ModeLeader && n.strat.Backend != "lab-everyone" && n.strat.Backend != "lab-advisory"
}

// until returns (and forgets) when the run expires on its store unless
// renewed (Unix ns; 0 when unknown).
func (n *node) until(run schedule.Run) int64 {
	k := runID{run.Job, run.Fire.UnixNano(), run.Token}
	n.untilMu.Lock()
	defer n.untilMu.Unlock()
	u := n.untils[k]
	delete(n.untils, k)
	return u
}

// granted returns when the store granted s's lease or run row (Unix ns,
// real clock; 0 when unknown): its grant history's time where the store
// keeps one, else the grant's call start (until, its expiry, minus the TTL
// the catalog asks for: LockAtMostFor is --ttl). Not the handler's start,
// which a pause between the grant and the handler makes late.
func (n *node) granted(ctx context.Context, s section, until int64) int64 {
	if n.grants != nil && s.lease.Key != "" {
		// Bounded short: the read stands between the grant and the
		// critical section; past it the call start is near enough. A
		// read the lab paused (SIGSTOP) outlives its bound while it is
		// stopped: a failed read is asked again, twice at most.
		var err error
		for range 3 {
			var gs []pglease.Grant
			gs, err = n.readGrants(ctx, s.lease.Key)
			for _, g := range gs {
				if g.Token == s.token {
					return g.Granted.UnixNano()
				}
			}
			if err == nil {
				break // read, and this grant is not among the newest
			}
		}
		if err != nil {
			n.emit(lab.NodeEvent{Kind: lab.EvError, Job: s.job, Tick: s.tick, Detail: "grant history: " + err.Error()})
		}
	}
	if until == 0 {
		return 0
	}
	return until - int64(n.c.TTL)
}

// readGrants reads key's newest grants (newest first: the grants made
// since this one, during a pause, come before it; a run's job is granted
// once a tick at most), within 500ms.
func (n *node) readGrants(ctx context.Context, key string) ([]pglease.Grant, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	return n.grants(ctx, key, grantsRead)
}

// grantsRead is how many of a key's newest grants granted reads.
const grantsRead = 64

func errText(e schedule.Event) string {
	if e.Err == nil {
		return e.Reason
	}
	if e.Reason == "" {
		return e.Err.Error()
	}
	return e.Reason + ": " + e.Err.Error()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tickOf is the number of the run's tick that fired at f (1 for the
// first), or 0 when f is outside the run.
func (n *node) tickOf(f time.Time) int {
	ns := n.start.Load()
	if ns == 0 || f.UnixNano() < ns {
		return 0
	}
	t := int((f.UnixNano()-ns)/int64(n.c.Tick)) + 1
	if t > n.c.Ticks {
		return 0
	}
	return t
}

// phases times a node's start, from its process's start: what the lab
// reports when nodes are slow to become ready.
type phases struct {
	last  time.Time
	parts []string
}

// newPhases starts the timing: the first phase is the process's own start
// (exec, the runtime, package init), read from /proc where there is one.
func newPhases() *phases {
	p := &phases{last: time.Now()}
	if since, ok := processAge(); ok {
		p.parts = append(p.parts, "exec "+since.Round(time.Millisecond).String())
	}
	return p
}

func (p *phases) mark(name string) {
	now := time.Now()
	p.parts = append(p.parts, name+" "+now.Sub(p.last).Round(time.Millisecond).String())
	p.last = now
}

func (p *phases) String() string { return strings.Join(p.parts, ", ") }

// processAge is how long ago this process started, from /proc/self/stat
// (the start in clock ticks since boot, at 100 a second on Linux) and
// /proc/uptime; false where they cannot be read.
func processAge() (time.Duration, bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: the start time is the 22nd field, the 20th after ')'.
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	var uptime float64
	if i < 0 || len(fields) < 20 {
		return 0, false
	}
	startTicks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return 0, false
	}
	if _, err := fmt.Sscanf(string(up), "%f", &uptime); err != nil {
		return 0, false
	}
	age := time.Duration(uptime*float64(time.Second)) - time.Duration(startTicks)*10*time.Millisecond
	return max(age, 0), true
}

// nodeClock is the scheduler's clock: the real one plus the node's skew,
// which the lab can change while the node runs.
type nodeClock struct{ skew atomic.Int64 }

func (c *nodeClock) Now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

func (c *nodeClock) Wake(at time.Time) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	t := time.AfterFunc(time.Until(at.Add(-time.Duration(c.skew.Load()))), func() { close(ch) })
	return ch, func() { t.Stop() }
}

func (n *node) emit(e lab.NodeEvent) {
	if e.At == 0 { // else the caller's: a time it also wrote to the store
		e.At = time.Now().UnixNano()
	}
	n.outMu.Lock()
	defer n.outMu.Unlock()
	_ = n.out.Encode(e) // os.Stdout is unbuffered: a SIGKILL loses no line
}
