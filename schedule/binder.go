package schedule

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/migrate"
)

// Handler runs the ticks of the catalog schedules that name it. args are
// the schedule's Entry.Args as its row had them when the tick was claimed;
// ctx carries the run (RunFrom, TokenFrom) and is cancelled as a Job's is.
type Handler func(ctx context.Context, args json.RawMessage) error

// Handle registers the handler called name before Start: this replica
// runs the catalog schedules whose Entry.Handler is name (Config.Catalog).
// A schedule whose handler a replica does not have is left to the
// replicas that have it; the replica reports it once per version
// (EventUnhandled, the metric aegis_schedule_unhandled) and `aegis
// schedule list` names the replicas that lack it.
func (s *Scheduler) Handle(name string, h Handler) error {
	if err := driver.CheckKey(name); err != nil {
		return fmt.Errorf("schedule: Handle: name: %w", err)
	}
	if len(name) > MaxNameLen {
		return invalid("schedule: Handle: name is %d bytes, at most %d are allowed", len(name), MaxNameLen)
	}
	if h == nil {
		return invalid("schedule: Handle %q: the handler is nil", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cfg.Catalog == nil:
		return invalid("schedule: Handle %q: Config.Catalog is not set: handlers run catalog schedules", name)
	case s.started:
		return fmt.Errorf("schedule: Handle %q after Start", name)
	case s.handlers[name] != nil:
		return invalid("schedule: Handle: handler %q is already registered", name)
	}
	s.handlers[name] = h
	return nil
}

// bound is what a catalog job was bound from.
type bound struct {
	version int64
	handler string
	sched   switched
	args    json.RawMessage // as the binder read them (a reclaim runs with them)
	stop    context.CancelFunc
	done    chan struct{}
}

// binder keeps this replica's catalog jobs in step with the catalog.
type binder struct {
	s    *Scheduler
	cat  *Catalog
	jobs map[string]*job // bound catalog jobs by name

	reported map[string]int64 // unhandled or unbindable schedules, reported at this version
	runNow   map[string]int64 // the last run now fired, by schedule (ms)
	lastGen  int64
}

// pollEvery is how often a binder reads its namespace's change counter:
// the bound on how late a change is seen without (or besides) NOTIFY.
const pollEvery = 500 * time.Millisecond

// bind reconciles this replica's catalog jobs with the catalog until ctx
// ends, then stops them (their runs end as a Stop ends them).
func (s *Scheduler) bind(ctx context.Context) {
	b := &binder{s: s, cat: s.cfg.Catalog, jobs: make(map[string]*job), reported: make(map[string]int64), runNow: make(map[string]int64)}
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	if b.cat.dialect == migrate.Postgres {
		wg.Go(func() { b.listen(ctx, wake) })
	}
	defer func() {
		wg.Wait()
		for name := range b.jobs {
			b.unbind(name)
		}
		s.setBound(nil)
	}()
	b.reconcile(ctx, true)
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-s.rebind:
			force = true
		case <-wake:
			force = true
		case <-poll.C:
		}
		b.reconcile(ctx, force)
	}
}

// listen wakes the binder on every NOTIFY of the namespace (PostgreSQL).
// LISTEN is refused on a hot standby: the binder polls there, and retries
// LISTEN every few seconds, in case the server is promoted.
func (b *binder) listen(ctx context.Context, wake chan<- struct{}) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := b.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if attempt == 0 && !isReadOnly(err) { // a standby refuses LISTEN: its claims say not-primary
			b.s.emit(Event{Kind: EventError, Reason: "LISTEN for catalog changes failed: polling every " + pollEvery.String(), Err: err})
		}
		if !backoff.Sleep(ctx, 5*time.Second) {
			return
		}
	}
}

func (b *binder) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := b.cat.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer func() { _ = conn.Raw(func(any) error { return sqldriver.ErrBadConn }) }() // discarded: never back to the pool LISTENing
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("LISTEN needs pgx's stdlib driver, not %T", dc)
		}
		pc := c.Conn()
		// Closed, not only discarded: over stdlib.OpenDBFromPool a discarded
		// connection is released to the pgx pool, which keeps an open one,
		// LISTEN and all, for its next user.
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = pc.Close(cctx)
		}()
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{b.cat.channel}.Sanitize()); err != nil {
			return err
		}
		select { // a change may have committed before LISTEN: look once more
		case wake <- struct{}{}:
		default:
		}
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			if n.Payload != b.cat.ns {
				continue
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
}

// beat records this replica and its handlers in the catalog (for `list`:
// Entry.Replicas, Entry.MissingOn) every heartbeatEvery until ctx ends,
// then removes the record. Every replica with a Catalog beats, in every
// mode (in leader mode, also while another replica leads). A standby
// refuses the write: its claims report that, not the heartbeat.
func (s *Scheduler) beat(ctx context.Context) {
	cat := s.cfg.Catalog
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.handlers))
	s.mu.Unlock()
	if names == nil {
		names = []string{}
	}
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		if err := cat.heartbeat(ctx, s.cfg.Node, names); err != nil && ctx.Err() == nil && !isReadOnly(err) {
			s.emit(Event{Kind: EventError, Reason: "write this replica's heartbeat", Err: err})
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = cat.leave(lctx, s.cfg.Node)
			return
		case <-t.C:
		}
	}
}

// reconcile binds, rebinds and unbinds catalog jobs to match the rows.
// Unless forced it reads the rows only when the namespace's change counter
// moved.
func (b *binder) reconcile(ctx context.Context, force bool) {
	gen, err := b.cat.generation(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.s.emit(Event{Kind: EventError, Reason: "read the catalog's change counter", Err: err})
		}
		return
	}
	if !force && gen == b.lastGen {
		return
	}
	rows, err := b.cat.rows(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.s.emit(Event{Kind: EventError, Reason: "read the catalog", Err: err})
		}
		return
	}
	b.lastGen = gen
	want := make(map[string]*row, len(rows))
	gone := make(map[string]bool) // paused here, or deleted since this binder bound it
	unhandled := 0
	watch := make(map[string]watched) // not bound here: their missed ticks are swept still
	for i := range rows {
		r := &rows[i]
		if !r.enabled {
			gone[r.name] = true
			b.watch(watch, r, CausePaused, "the schedule was paused")
			continue
		}
		if b.s.codeJob(r.name) {
			b.report(r, fmt.Sprintf("a job of this replica's code has the name %q: the catalog schedule is not bound here", r.name), nil)
			b.watch(watch, r, CauseUnbound, fmt.Sprintf("no replica bound it: %s has a code job of the same name", b.s.cfg.Node))
			continue
		}
		b.s.mu.Lock()
		h := b.s.handlers[r.handler]
		b.s.mu.Unlock()
		if h == nil && !b.s.claim.enqueues() { // a leader enqueues every schedule: its workers have the handlers
			unhandled++
			b.report(r, fmt.Sprintf("this replica has no handler %q: the replicas that have it run the schedule", r.handler), nil)
			b.watch(watch, r, CauseUnbound, fmt.Sprintf("no replica bound it: %s has no handler %q", b.s.cfg.Node, r.handler))
			continue
		}
		want[r.name] = r
	}
	b.s.misses.setWatched(watch)
	b.s.metrics.setUnhandled(unhandled)
	for name, j := range b.jobs {
		if r := want[name]; r == nil || r.version != j.bound.version {
			b.unbind(name)
		}
		if want[name] == nil && !b.s.codeJob(name) {
			gone[name] = true
		}
	}
	b.s.setGone(gone, want)
	for name, r := range want {
		if b.jobs[name] != nil {
			continue
		}
		if err := b.bindRow(ctx, r); err != nil {
			b.report(r, "the schedule cannot run in this mode", err)
		}
	}
	b.s.setBound(slices.Collect(maps.Values(b.jobs)))
	b.fireRunsNow(ctx, want)
	b.s.readyOnce.Do(func() { close(b.s.ready) })
}

// watch adds catalog row r, not bound here, to the schedules whose missed
// ticks this replica sweeps, with the cause it knows. A row whose spec
// does not parse is left out (the binder reports it).
func (b *binder) watch(w map[string]watched, r *row, cause MissCause, detail string) {
	e, next, err := r.parsed(b.s.ns)
	if err != nil {
		return
	}
	sw, err := r.schedule(next)
	if err != nil {
		return
	}
	j := &job{Job: e.job(sw, nil), sched: sw}
	w[r.name] = watched{sched: sw, deadline: j.deadline, cause: cause, detail: detail}
}

// report emits EventUnhandled once per schedule version.
func (b *binder) report(r *row, reason string, err error) {
	if b.reported[r.name] == r.version {
		return
	}
	b.reported[r.name] = r.version
	b.s.emit(Event{Kind: EventUnhandled, Job: r.name, Reason: reason, Err: err, Token: aegis.Token(r.version)})
}

// bindRow starts the loop of a catalog schedule.
func (b *binder) bindRow(ctx context.Context, r *row) error {
	e, next, err := r.parsed(b.cat.ns)
	if err != nil {
		return err
	}
	sw, err := r.schedule(next)
	if err != nil {
		return err
	}
	// The closure captures copies, not r: r points into the slice of every
	// row the reconcile read, which a bound job would keep alive.
	handler, node := r.handler, b.s.cfg.Node
	b.s.mu.Lock()
	h := b.s.handlers[handler]
	b.s.mu.Unlock()
	spec := e.job(sw, func(ctx context.Context) error {
		if h == nil { // leader mode: the leader enqueues, a worker runs (catalogWork)
			return fmt.Errorf("schedule: node %s has no handler %q", node, handler)
		}
		run, _ := RunFrom(ctx)
		return h(ctx, run.Args)
	})
	v, _, err := spec.validate(b.s.claim)
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(ctx)
	// looping from now, not from when its goroutine starts: the sweep
	// leaves its ticks to it from the start (job.settled).
	j := &job{Job: v, sched: sw, s: b.s, running: make(map[*active]struct{}), runCtx: ctx, looping: true,
		bound: &bound{version: r.version, handler: r.handler, sched: sw, args: json.RawMessage(r.args), stop: stop, done: make(chan struct{})}}
	// A rebind goes on from the last tick this replica saw; a first bind
	// from the scheduler's start, as a job of the code does: ticks that
	// fell between Start and a slow first read of the catalog are due (or
	// reported misfired), not silently skipped.
	from := b.s.startedAt
	if old := b.s.lastTick(r.name); !old.IsZero() {
		from = old
	}
	b.jobs[r.name] = j
	b.s.metrics.series(r.name) // its series, at zero, before its first tick
	b.s.emit(Event{Kind: EventBound, Job: r.name, Token: aegis.Token(r.version), Reason: "bound " + e.Spec() + " (version " + fmt.Sprint(r.version) + ")"})
	go func() {
		defer close(j.bound.done)
		j.loopFrom(lctx, from)
	}()
	return nil
}

// unbind stops a catalog job's loop and waits for it (not for its runs).
func (b *binder) unbind(name string) {
	j := b.jobs[name]
	delete(b.jobs, name)
	j.bound.stop()
	<-j.bound.done // the loop returns once its claim in flight has (bounded by claimTimeout)
	b.s.noteTick(name, j.lastSeen())
	b.s.emit(Event{Kind: EventBound, Job: name, Token: aegis.Token(j.bound.version), Reason: "unbound version " + fmt.Sprint(j.bound.version)})
}

// checkCatalog is the catalog half of a claim in lease and leader mode
// (q: the check, with FOR SHARE inside a transaction): ok false when the
// catalog refuses tick f.
func (s *Scheduler) checkCatalog(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, j *job, f time.Time, forShare bool) (c claimed, ok bool, err error) {
	cat := s.cfg.Catalog
	spec, tz := j.bound.sched.specAt(f)
	stmt := cat.q.check
	if forShare {
		stmt += " FOR SHARE"
	}
	var args string
	err = q.QueryRowContext(ctx, stmt, cat.ns, j.Name, f.UnixMilli(), spec, tz, false).Scan(&args, &c.version)
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	c.args = json.RawMessage(args)
	return c, true, nil
}

// claimed is what a catalog claim read from the row.
type claimed struct {
	args    json.RawMessage
	version int64
}

// isReadOnly reports a write refused by a PostgreSQL hot standby
// (SQLSTATE 25006, read_only_sql_transaction): this replica's store is not
// the primary.
func isReadOnly(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "25006"
}
