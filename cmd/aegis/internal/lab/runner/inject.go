package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/testing/servers"
)

// Inject applies a fault now, whatever its At: a pause or partition lasts
// its For, a kill restarts the node (or the server member), a crash
// restarts PostgreSQL, a skew changes the node's clock from now on, a
// latency applies to the node's connections from now on. It returns once
// the fault has begun (for a holder or writer target, once a node is in
// the critical section or its write, or with an error if none is before
// ctx ends; a promotion, once the standby is promoted); its end is
// reported as a healed event. A fault that kills,
// restarts or fails over a server holds that server for the run until it
// ends, and is refused while another run of the session holds it. A fault
// asked for once the run is stopping or over is refused.
func (r *Run) Inject(ctx context.Context, ch lab.Chaos) error {
	if n := ch.Node(); n > r.cfg.Nodes {
		return badinput.Errorf("--chaos %s: node%d does not exist: the run has %d nodes", ch, n, r.cfg.Nodes)
	}
	if err := r.cfg.CheckChaos(r.strat, ch); err != nil && ch.Kind != lab.Skew {
		return badinput.Errorf("--chaos %s: %w", ch, err)
	}
	if err := r.s.admitChaos(ch); err != nil {
		return err
	}
	select {
	case <-r.done:
		return errors.New("the run has ended")
	default:
	}
	if err := r.s.hold(r, ch); err != nil {
		return err
	}
	began := make(chan error, 1)
	// Added under mu, and not once the supervisor waits for the faults: a
	// fault added after that wait would restart a node after the run
	// stopped its nodes, and leave it running.
	r.mu.Lock()
	if r.chaosShut || r.ending() {
		r.mu.Unlock()
		return errors.New("the run has ended")
	}
	r.chaos.Go(func() {
		ctx, cancel := r.lifetime()
		defer cancel()
		if err := r.applyNotify(ctx, ch, began); err != nil {
			r.note("%s: %v", ch, err)
		}
	})
	r.mu.Unlock()
	select {
	case err := <-began:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errDown is a fault's target node being down already (killed by another
// fault and not yet back): what the fault would do to it is done, so the
// run is no less conclusive for it.
var errDown = errors.New("nothing more to do to it")

// apply applies a scheduled fault.
func (r *Run) apply(ctx context.Context, ch lab.Chaos) error {
	return r.applyNotify(ctx, ch, make(chan error, 1))
}

// applyNotify applies ch, sends on began once it has begun (or failed),
// and returns when it has ended.
func (r *Run) applyNotify(ctx context.Context, ch lab.Chaos, began chan<- error) (err error) {
	sent := false
	begin := func(err error) {
		if !sent {
			sent = true
			began <- err
		}
	}
	defer func() {
		if err != nil && !sent && !errors.Is(err, errDown) {
			r.notApplied(ch, err)
		}
		begin(err)
	}()
	if _, ok := ch.ServerKind(); ok || ch.Kind == lab.Latency {
		r.mu.Lock()
		r.serverFault = true
		r.mu.Unlock()
	}
	switch ch.Kind {
	case lab.Pause:
		return r.pause(ctx, ch, begin)
	case lab.Kill:
		if k, ok := ch.ServerKind(); ok {
			return r.killMember(ctx, ch, k, begin)
		}
		return r.killNode(ctx, ch, begin)
	case lab.Partition:
		return r.partition(ctx, ch, begin)
	case lab.Skew:
		return r.skew(ch)
	case lab.Edit:
		return r.edit(ctx, ch)
	case lab.Latency:
		r.setLatency(ch)
		r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: ch.String()})
		return nil
	case lab.Failover:
		return r.failover(ctx, ch, begin)
	case lab.Restart:
		return r.restartRedis(ctx, ch)
	case lab.Crash:
		return r.crashPostgres(ctx, ch, begin)
	case lab.Promote:
		return r.promoteStandby(ctx, ch, begin)
	}
	return fmt.Errorf("unknown fault %q", ch.Kind)
}

// pause stops the target node with SIGSTOP for ch.For, then resumes it.
// A holder paused inside a job's critical section stays stopped past For
// until its successor has read the job's ledger with a greater token
// (awaitSuccessor): the fence holds that token from that read on, so the
// late write the pause is about meets it, whichever tick the pause landed
// in. The healed event says how long the pause lasted and why.
func (r *Run) pause(ctx context.Context, ch lab.Chaos, begin func(error)) error {
	np, detail, err := r.target(ctx, ch)
	if err != nil {
		return err
	}
	pid, err := r.stopSignal(ctx, np)
	if err != nil {
		return err
	}
	inside, err := r.stopOutsideSQLiteWrite(ctx, np)
	if err != nil {
		return err
	}
	if inside {
		detail += ", inside a SQLite write transaction after 10 tries to stop it outside one: every node waits on the store's lock until it resumes"
	}
	stopped := time.Now()
	r.mu.Lock()
	np.paused = true
	from := len(r.events)
	var held heldSection
	if ch.Target == lab.Holder {
		held = r.heldLocked(np)
	}
	r.mu.Unlock()
	ev := lab.Event{Kind: lab.EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d (pid %d) paused with SIGSTOP for %s%s", ch, np.n, pid, ch.For, detail)}
	if held.job != "" {
		ev.Job, ev.Tick, ev.Token = held.job, held.tick, held.token
		ev.Detail += fmt.Sprintf(", and longer until another node has read %s's ledger with a greater token (at most one tick past the job's second fire time after the pause's %s and the lease's expiry)", held.job, ch.For)
	}
	r.labEvent(ev)
	begin(nil)
	backoff.Sleep(ctx, ch.For) // a stopped run resumes at once
	why := fmt.Sprintf(": the %s asked", ch.For)
	switch {
	case ctx.Err() != nil:
		why = ": the run ended"
	case held.job != "":
		why = r.awaitSuccessor(ctx, np.n, held, from, stopped.Add(ch.For), ch.For)
	}
	r.mu.Lock()
	np.paused = false
	r.mu.Unlock()
	_, _ = r.signal(np, syscall.SIGCONT)
	r.labEvent(lab.Event{Kind: lab.EventHealed, Node: np.n, Job: held.job, Tick: held.tick, Token: held.token,
		Detail: fmt.Sprintf("node%d resumed with SIGCONT after %.2fs%s", np.n, time.Since(stopped).Seconds(), why)})
	return nil
}

// stopOutsideSQLiteWrite makes sure that np, just stopped, holds no
// write lock of a SQLite store: SQLite has one for the whole file, and a
// node stopped inside a write transaction (a renewal, another job's
// acquire, a run record) would stop every node for the whole pause, a
// different fault than a paused holder's late write. The lab takes the
// lock itself to tell: when it cannot within 100 ms, np holds it (the
// running nodes hold it for milliseconds), so np is resumed to finish
// that transaction and stopped again, up to 10 times, for 20 ms the first
// time and twice as long each next (at most 640 ms: a loaded machine may
// not run np at once). It reports whether np is still stopped inside one
// (the chaos event says so).
func (r *Run) stopOutsideSQLiteWrite(ctx context.Context, np *nodeProc) (bool, error) {
	path, ok := strings.CutPrefix(r.store, "sqlite:")
	if !ok {
		return false, nil
	}
	for try := 0; try < 10; try++ {
		free, err := sqliteWriteLockFree(ctx, path, 100*time.Millisecond)
		if err != nil || free {
			return false, err
		}
		if _, err := r.signal(np, syscall.SIGCONT); err != nil {
			return false, err
		}
		backoff.Sleep(ctx, min(20*time.Millisecond<<try, 640*time.Millisecond))
		if _, err := r.stopSignal(ctx, np); err != nil {
			return false, err
		}
	}
	free, err := sqliteWriteLockFree(ctx, path, 100*time.Millisecond)
	return !free && err == nil, err
}

// sqliteWriteLockFree reports whether the write lock of the SQLite
// database at path can be taken within wait (and gives it back at once).
// A lock of the file's that a stopped process holds otherwise, one that
// keeps a new connection from reading the WAL (SQLITE_PROTOCOL, after
// SQLite's own retries of some seconds), counts as taken too: it stops
// every node as the write lock would.
func sqliteWriteLockFree(ctx context.Context, path string, wait time.Duration) (bool, error) {
	// The database is in WAL mode already: no pragma but the wait, so
	// that opening reads nothing.
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + fmt.Sprintf("?_pragma=busy_timeout(%d)", wait.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return false, fmt.Errorf("lab: open the store to probe its lock: %w", err)
	}
	defer db.Close()
	held := func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		switch se.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		if held(err) {
			return false, nil
		}
		return false, fmt.Errorf("lab: open the store to probe its lock: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		if held(err) {
			return false, nil
		}
		return false, fmt.Errorf("lab: probe the store's lock: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		return false, fmt.Errorf("lab: probe the store's lock: %w", err)
	}
	return true, nil
}

// heldSection is the critical section a paused holder was inside: its
// job, tick and token, and when its lease expires on the store (run
// seconds; 0 when nothing expires there).
type heldSection struct {
	job   string
	tick  int
	token int64
	until float64
}

// heldLocked is the critical section np is inside, with its grant's
// expiry from its last grant or renewal of the job. Caller holds mu.
func (r *Run) heldLocked(np *nodeProc) heldSection {
	a := r.sections[np.critical]
	if a == nil {
		return heldSection{}
	}
	h := heldSection{job: a.Job, tick: a.Tick, token: a.Token}
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; e.Node == np.n && e.Job == h.job && (e.Kind == lab.EventAcquired || e.Kind == lab.EventRenewed) {
			h.until = e.Until
			break
		}
	}
	return h
}

// successorOf reports whether e is a successor's read of h's job: another
// node's, with a greater token (any, for a strategy without tokens).
func successorOf(e lab.Event, n int, h heldSection) bool {
	return e.Kind == lab.EventEntered && e.Node != n && e.Node != 0 && e.Job == h.job && (h.token == 0 || e.Token > h.token)
}

// awaitSuccessor keeps node n paused, once the time asked (forAsked)
// has ended at asked, until another node has read h's job's ledger with
// a greater token (since the pause's from-th event). It is bounded: at
// most one tick past the job's second fire time after both asked and the
// lease's expiry (the first is the tick a successor should be granted at,
// but it can find the lease not expired yet by a hair), or at asked when
// the run has no such fire time left. It says why the pause ended.
func (r *Run) awaitSuccessor(ctx context.Context, n int, h heldSection, from int, asked time.Time, forAsked time.Duration) string {
	found := func(e lab.Event, then string) string {
		return fmt.Sprintf(": the %s asked%s node%d had read %s's ledger with token %d > %d (at %.2fs)", forAsked, then, e.Node, h.job, e.Token, h.token, e.T)
	}
	r.mu.Lock()
	for _, e := range r.events[from:] {
		if successorOf(e, n, h) {
			r.mu.Unlock()
			return found(e, "; by then")
		}
	}
	bound, ok := r.successorBoundLocked(h, asked)
	if !ok {
		r.mu.Unlock()
		return fmt.Sprintf(": the %s asked; no other node had read %s's ledger with a greater token, and no tick of it is left in the run for one", forAsked, h.job)
	}
	w := r.addWaiterLocked(func(e lab.Event) bool { return successorOf(e, n, h) })
	r.mu.Unlock()
	wctx, cancel := context.WithDeadline(ctx, bound)
	defer cancel()
	e, err := r.waitOn(wctx, w)
	switch {
	case err == nil:
		return found(e, ", then held until")
	case ctx.Err() != nil:
		return fmt.Sprintf(": the %s asked, then held for a successor until the run ended", forAsked)
	}
	return fmt.Sprintf(": the %s asked, then held for a successor until %.2fs, its bound: no other node read %s's ledger with a greater token by then", forAsked, r.secs(bound.UnixNano()), h.job)
}

// successorBoundLocked is awaitSuccessor's bound, and false when the run
// has no fire time of h's job left after asked and the lease's expiry.
// Caller holds mu.
func (r *Run) successorBoundLocked(h heldSection, asked time.Time) (time.Time, bool) {
	i := slices.IndexFunc(r.jobs, func(j lab.JobSpec) bool { return j.Name == h.job })
	if i < 0 {
		return time.Time{}, false
	}
	after := asked
	if exp := r.start.Add(time.Duration(h.until * float64(time.Second))); h.until > 0 && exp.After(after) {
		after = exp
	}
	var fires []time.Time
	for t := 1; t <= r.cfg.Ticks() && len(fires) < 2; t++ {
		if at := r.tickTime(t); !at.Before(after) && r.jobs[i].FiresAt(at, r.edits) {
			fires = append(fires, at)
		}
	}
	if len(fires) == 0 {
		return time.Time{}, false
	}
	return fires[len(fires)-1].Add(r.cfg.Tick), true
}

// killNode kills the target node with SIGKILL and starts it again, a new
// incarnation, once it has exited.
func (r *Run) killNode(ctx context.Context, ch lab.Chaos, begin func(error)) error {
	np, detail, err := r.target(ctx, ch)
	if err != nil {
		return err
	}
	// Two faults can name one node (two kills waiting for the next
	// commit see the same one): one kills and restarts it, the other
	// would start a second process for it. Until the restart ends, not
	// only until it starts a process (which clears killed).
	r.mu.Lock()
	if np.killed || np.restarting {
		r.mu.Unlock()
		return fmt.Errorf("node%d%s is being killed and restarted by another fault already: %w", np.n, detail, errDown)
	}
	np.killed, np.restarting = true, true
	exited := np.exited
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		np.restarting = false
		r.mu.Unlock()
	}()
	pid, err := r.signal(np, syscall.SIGKILL)
	if err != nil {
		r.mu.Lock()
		np.killed = false // not being restarted: the run's end waits for it no more
		r.mu.Unlock()
		return err
	}
	<-exited
	r.labEvent(lab.Event{Kind: lab.EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d (pid %d) killed with SIGKILL%s; restarting it", ch, np.n, pid, detail)})
	begin(nil)
	if ctx.Err() != nil {
		r.mu.Lock()
		np.killed = false
		r.mu.Unlock()
		return nil
	}
	r.mu.Lock()
	np.cfg.Incarnation++
	r.mu.Unlock()
	return r.restart(ctx, np)
}

// partition cuts the target node's connections to ch.Server (to all its
// servers when none is named) for ch.For, then heals them.
func (r *Run) partition(ctx context.Context, ch lab.Chaos, begin func(error)) error {
	np, detail, err := r.target(ctx, ch)
	if err != nil {
		return err
	}
	cut, kept := r.proxiesOf(np, servers.Kind(ch.Server))
	if len(cut) == 0 {
		return fmt.Errorf("node%d has no connection to %s to cut", np.n, ch.Server)
	}
	for _, p := range cut {
		p.Cut()
	}
	from := "its servers"
	if ch.Server != "" {
		from = ch.Server + " only"
		if len(kept) > 0 {
			from += " (" + strings.Join(kept, " and ") + " still reachable)"
		}
	}
	r.labEvent(lab.Event{Kind: lab.EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d cut from %s for %s (connections dropped, new ones refused)%s", ch, np.n, from, ch.For, detail)})
	begin(nil)
	backoff.Sleep(ctx, ch.For)
	for _, p := range cut {
		p.Heal()
	}
	r.labEvent(lab.Event{Kind: lab.EventHealed, Node: np.n, Detail: fmt.Sprintf("node%d's partition healed", np.n)})
	return nil
}

// skew tells a node that its clock is ch.Offset off from now on.
func (r *Run) skew(ch lab.Chaos) error {
	np := r.node(ch.Node())
	r.mu.Lock()
	np.faulted = true
	stdin := np.stdin
	np.cfg.Skew = ch.Offset
	r.mu.Unlock()
	b, _ := json.Marshal(lab.ControlLine{Skew: ptr(int64(ch.Offset))})
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("tell node%d its skew: %w", np.n, err)
	}
	r.labEvent(lab.Event{Kind: lab.EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d's clock is now %s off", ch, np.n, ch.Offset)})
	return nil
}

func ptr[T any](v T) *T { return &v }

func (r *Run) node(n int) *nodeProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[n-1]
}

// signal signals np's current process and returns its pid.
func (r *Run) signal(np *nodeProc, sig syscall.Signal) (int, error) {
	r.mu.Lock()
	cmd, exited := np.cmd, np.exited
	r.mu.Unlock()
	select {
	case <-exited:
		return 0, fmt.Errorf("node%d is not running: %w", np.n, errDown)
	default:
	}
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return pid, fmt.Errorf("signal node%d: %w", np.n, err)
	}
	return pid, nil
}

// stopSignal sends np SIGSTOP and returns once every thread of it is
// stopped (servers.WaitStopped, 5 s at most): on a loaded machine the
// process may run on (and begin a write) for a while after kill(2).
func (r *Run) stopSignal(ctx context.Context, np *nodeProc) (int, error) {
	pid, err := r.signal(np, syscall.SIGSTOP)
	if err != nil {
		return pid, err
	}
	if err := servers.WaitStopped(ctx, pid, true, 5*time.Second); err != nil {
		return pid, fmt.Errorf("stop node%d: %w", np.n, err)
	}
	return pid, nil
}

// proxy is what faults need of a proxy.
type proxy interface {
	Cut()
	Heal()
	SetLatency(time.Duration)
	SetUpstream(string)
	Upstream() string
}

// proxiesOf returns np's proxies to the servers of kind k (all of them
// when k is ""), and the kinds it has proxies to besides.
func (r *Run) proxiesOf(np *nodeProc, k servers.Kind) (cut []proxy, kept []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, kind := range servers.Kinds {
		ps := np.proxies[kind]
		if len(ps) == 0 {
			continue
		}
		if k != "" && kind != k {
			kept = append(kept, string(kind))
			continue
		}
		for _, p := range ps {
			cut = append(cut, p)
		}
	}
	return cut, kept
}

func (r *Run) setLatency(ch lab.Chaos) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, np := range r.nodes {
		for _, p := range np.proxies[servers.Kind(ch.Target)] {
			p.SetLatency(ch.Offset)
		}
	}
}
