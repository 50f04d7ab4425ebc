package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/node"
)

type mode int

const (
	modeRunKey mode = iota + 1
	modeLease
	modeLeader
)

// Config configures a Scheduler. Exactly one of Store (run-key mode),
// Locker (lease mode) and Leader (leader mode) is set.
type Config struct {
	// Node names this scheduler in run rows, events and logs. Default
	// "HOSTNAME-PID"; at most 100 bytes.
	Node string
	// Store selects run-key mode: each tick is a row keyed by (job, fire
	// time), and the node whose insert lands runs it.
	Store *Store
	// Locker selects lease mode (ShedLock's semantics): a tick runs on the
	// node that acquires the job's lease.
	Locker aegis.Locker
	// Leader selects leader mode: an elected scheduler enqueues each tick
	// into package queue, and workers compete (see LeaderConfig and
	// Scheduler.AddWorker). PostgreSQL only.
	Leader *LeaderConfig
	// Catalog, when set, is the catalog of schedules this scheduler binds
	// beside its code jobs (Add): every replica reconciles its timers with
	// the catalog's rows, at Start and within a second of every change,
	// and runs the schedules whose handler it has (Handle). It must be on
	// the same database as the Store (run-key mode) or Leader.Pool, and
	// its namespace is the scheduler's: the Store's (or
	// Leader.Namespace) must be the same. In lease mode it may be anywhere.
	Catalog *Catalog
	// Registerer, when set, receives the scheduler's metrics (see the
	// package's metrics.go for the list).
	Registerer prometheus.Registerer
	// Clock is the source of fire times. Default SystemClock().
	Clock Clock
	// ReapInterval is how often run-key mode looks for crashed runs (run
	// rows past their expiry) of this scheduler's jobs. Default 1s; at
	// least 1ms.
	ReapInterval time.Duration
	// Retention is how long run-key mode keeps ended run rows; a winner
	// prunes its job's older rows after each run. It must exceed the
	// largest clock difference between replicas, or a lagging replica could
	// run a pruned tick again. Default 7 days.
	Retention time.Duration
	// OnEvent, when set, is called for every event, from the scheduler's
	// goroutines; it must not block.
	OnEvent func(Event)
	// Logger receives events at debug level and failures at warn level.
	// Default: none.
	Logger *slog.Logger
}

// EventKind says what happened.
type EventKind string

const (
	EventRun      EventKind = "run"      // this node started a run
	EventDone     EventKind = "done"     // a run ended; Err is the job's error
	EventSkipped  EventKind = "skipped"  // another node has the tick, the lease is held, or overlap forbid
	EventMisfired EventKind = "misfired" // ticks missed their starting deadline and were dropped: Attempt of them, consecutive from Fire
	EventLost     EventKind = "lost"     // a run's lease or run row was lost (reclaimed, replaced, expired)
	EventError    EventKind = "error"    // a store or lock call failed
	EventReclaim  EventKind = "reclaim"  // this node took over a crashed run (or abandoned it)
	EventRenewed  EventKind = "renewed"  // the keep-alive renewed a running run's lease or run row (Until: its new expiry)

	// The catalog (Config.Catalog).
	EventBound      EventKind = "bound"       // a catalog schedule was bound or unbound (Token: its version)
	EventUnhandled  EventKind = "unhandled"   // a catalog schedule this replica cannot run (no handler); reported once per version
	EventRefused    EventKind = "refused"     // the catalog refused a tick: paused, deleted, or changed at that fire time
	EventNotPrimary EventKind = "not-primary" // the store is a hot standby (read-only): this replica is not the primary, and runs nothing
	EventRunNow     EventKind = "run-now"     // a Catalog.RunNow reached this replica, which fires it (Fire: its fire time)

	// Leader mode.
	EventElected  EventKind = "elected"  // this node leads: it enqueues the ticks (Token: the term token)
	EventDeposed  EventKind = "deposed"  // this node's term ended (Err: why); it campaigns again
	EventEnqueued EventKind = "enqueued" // the leader enqueued a tick's run (Reason: the queue job)
)

// Event is something that happened to a tick.
type Event struct {
	Kind    EventKind
	Job     string
	Fire    time.Time
	Node    string
	Token   aegis.Token
	Attempt int
	Reason  string
	Err     error
	// Until is, on EventRun and EventRenewed, when the run's lease or run
	// row expires on the store unless renewed again, by this process's
	// real clock: the grant's, claim's or renewal's call start plus the TTL
	// it asked for (the store counts from when it received the call, a
	// little later). Zero on other events and in leader mode.
	Until time.Time
}

// Scheduler runs jobs on their schedules, once per tick across every
// replica that shares its Store or Locker.
type Scheduler struct {
	cfg     Config
	mode    mode
	log     *slog.Logger
	ns      string
	metrics *metrics

	handlers map[string]Handler   // catalog handlers by name
	rebind   chan struct{}        // asks the binder to read the catalog now
	claimSQL string               // run-key mode's catalog claim (PostgreSQL)
	boundJob []*job               // the catalog jobs bound now (the reaper's)
	ticks    map[string]time.Time // the last tick an unbound catalog job's loop saw
	gone     map[string]bool      // catalog schedules paused or deleted: the reaper abandons their crashed runs

	mu      sync.Mutex
	jobs    []*job
	names   map[string]bool
	started bool
	stopped bool
	// startedAt is Start's time on the scheduler's clock; ready is closed
	// once the catalog has been read (see Ready).
	startedAt time.Time
	ready     chan struct{}
	readyOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	leader  *leader                 // leader mode
	endTerm context.CancelCauseFunc // ends the current term's loops (leader mode)
}

// New returns a Scheduler. The error names the field that is wrong.
func New(cfg *Config) (*Scheduler, error) {
	if cfg == nil {
		return nil, invalid("schedule: Config is nil: set Config.Store, Config.Locker or Config.Leader")
	}
	c := *cfg
	c.Node = cmp.Or(c.Node, node.Default())
	c.ReapInterval = cmp.Or(c.ReapInterval, time.Second)
	c.Retention = cmp.Or(c.Retention, 7*24*time.Hour)
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := node.Check("schedule: Config.Node", c.Node); err != nil {
		return nil, invalid("%w", err)
	}
	s := &Scheduler{cfg: c, log: c.Logger, names: make(map[string]bool), handlers: make(map[string]Handler),
		rebind: make(chan struct{}, 1), ready: make(chan struct{}), ticks: make(map[string]time.Time), gone: make(map[string]bool), ns: DefaultNamespace}
	set := 0
	for _, ok := range []bool{c.Store != nil, c.Locker != nil, c.Leader != nil} {
		if ok {
			set++
		}
	}
	switch {
	case set > 1:
		return nil, invalid("schedule: set one of Config.Store (run-key mode), Config.Locker (lease mode) and Config.Leader (leader mode), not several")
	case c.Store != nil:
		s.mode = modeRunKey
	case c.Locker != nil:
		s.mode = modeLease
	case c.Leader != nil:
		s.mode = modeLeader
		catalogNS := ""
		if c.Catalog != nil {
			catalogNS = c.Catalog.ns
		}
		l, err := newLeader(c.Leader, c.Node, catalogNS)
		if err != nil {
			return nil, err
		}
		s.leader = l
	default:
		return nil, invalid("schedule: none of Config.Store (run-key mode), Config.Locker (lease mode) and Config.Leader (leader mode) is set")
	}
	if err := s.checkNamespaces(); err != nil {
		return nil, err
	}
	m, err := newMetrics(c.Registerer, s.ns, c.Node)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	switch {
	case c.ReapInterval < time.Millisecond:
		return nil, invalid("schedule: Config.ReapInterval %s is shorter than 1ms", c.ReapInterval)
	case c.Retention < 0:
		return nil, invalid("schedule: Config.Retention %s is negative", c.Retention)
	}
	return s, nil
}

// Node is this scheduler's node name.
func (s *Scheduler) Node() string { return s.cfg.Node }

// Add registers a job before Start. The error names the field that is
// wrong (Job.Name, Job.Cron, Job.LockAtLeastFor, ...).
func (s *Scheduler) Add(j Job) error {
	v, sched, err := j.validate(s.mode)
	if err != nil {
		return fmt.Errorf("schedule: job %q: %w", j.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("schedule: job %q: Add after Start", j.Name)
	}
	if s.names[j.Name] {
		return invalid("schedule: job %q: Job.Name is already added", j.Name)
	}
	s.names[j.Name] = true
	s.jobs = append(s.jobs, &job{Job: v, sched: sched, s: s, running: make(map[*active]struct{})})
	return nil
}

// Start starts a goroutine per job (and the reaper in run-key mode). The
// jobs stop when ctx ends or Stop is called. Start may be called once.
//
// In leader mode it creates the missing tables (ctx bounds that), then
// campaigns in a goroutine: while this replica leads, its job loops
// enqueue the ticks; when leadership ends it campaigns again.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := s.checkCatalogTable(ctx); err != nil {
		return err
	}
	if s.mode == modeLeader {
		if _, err := s.leader.open(ctx); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("schedule: Start called twice")
	}
	s.started = true
	s.startedAt = s.cfg.Clock.Now()
	if s.cfg.Catalog == nil || s.mode == modeLeader {
		s.readyOnce.Do(func() { close(s.ready) })
	}
	ctx, s.cancel = context.WithCancel(ctx)
	if s.cfg.Catalog != nil {
		s.wg.Go(func() { s.beat(ctx) })
	}
	switch s.mode {
	case modeLeader:
		s.wg.Go(func() { s.lead(ctx) })
		return nil
	case modeRunKey:
		s.wg.Go(func() { s.reap(ctx) })
	}
	if s.cfg.Catalog != nil {
		s.wg.Go(func() { s.bind(ctx) })
	}
	for _, j := range s.jobs {
		s.wg.Go(func() { j.loop(ctx) })
	}
	return nil
}

// Ready returns a channel that is closed once the scheduler has read its
// Catalog and bound its schedules (at once for a scheduler without a
// Catalog, and in leader mode, whose leader reads the catalog when it is
// elected): a readiness probe, or a test that must not fire a tick before
// the replica has its timers set. A catalog that cannot be read keeps it
// open (the binder retries, with EventError).
func (s *Scheduler) Ready() <-chan struct{} { return s.ready }

// checkNamespaces sets the scheduler's namespace: its Catalog's, which the
// Store's (or Leader.Namespace) must equal.
func (s *Scheduler) checkNamespaces() error {
	var other, field string
	switch s.mode {
	case modeRunKey:
		other, field = s.cfg.Store.ns, "the Store's namespace (StoreConfig.Namespace)"
	case modeLeader:
		other, field = s.leader.cfg.Namespace, "Config.Leader.Namespace"
	}
	if c := s.cfg.Catalog; c != nil {
		if other != "" && other != c.ns {
			return invalid("schedule: the Catalog's namespace %q is not %s %q: one scheduler runs one namespace", c.ns, field, other)
		}
		s.ns = c.ns
	} else if other != "" {
		s.ns = other
	}
	if s.cfg.Catalog != nil && s.mode == modeRunKey {
		if s.cfg.Catalog.dialect != s.cfg.Store.dialect {
			return invalid("schedule: Config.Catalog and Config.Store are on different databases (one PostgreSQL, one SQLite): a claim checks the catalog in the statement that inserts the run")
		}
		s.claimSQL = fmt.Sprintf(claimCatalogPG, s.cfg.Store.table, s.cfg.Catalog.q.check)
	}
	return nil
}

// checkCatalogTable fails when the run-key Store's database does not have
// the Catalog's table: the claim reads both in one statement.
func (s *Scheduler) checkCatalogTable(ctx context.Context) error {
	if s.cfg.Catalog == nil || s.mode != modeRunKey {
		return nil
	}
	var n int
	if err := s.cfg.Store.db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.cfg.Catalog.table+" WHERE false").Scan(&n); err != nil {
		return invalid("schedule: Config.Catalog must be on the Store's database (a claim checks the catalog in the statement that inserts the run): %w", err)
	}
	return nil
}

// codeJob reports whether name is a job added in code.
func (s *Scheduler) codeJob(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// setBound records the bound catalog jobs for the reaper.
func (s *Scheduler) setBound(js []*job) {
	s.mu.Lock()
	s.boundJob = js
	s.mu.Unlock()
	s.metrics.bound.Set(float64(len(js)))
}

// reapable is the jobs the reaper looks after: the code jobs and the bound
// catalog jobs.
func (s *Scheduler) reapable() []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clip(s.jobs), s.boundJob...)
}

// setGone records the catalog schedules paused or deleted (adding to the
// deleted ones already known), and forgets those bound again (want).
func (s *Scheduler) setGone(gone map[string]bool, want map[string]*row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.gone {
		if want[name] != nil {
			delete(s.gone, name)
		}
	}
	for name := range gone {
		s.gone[name] = true
	}
}

func (s *Scheduler) goneNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.gone))
}

// noteTick remembers the last tick an unbound catalog job's loop saw, so
// that its next binding goes on from there.
func (s *Scheduler) noteTick(name string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.After(s.ticks[name]) {
		s.ticks[name] = t
	}
}

func (s *Scheduler) lastTick(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ticks[name]
}

// lookBack asks the binder to read the catalog now: a claim found the row
// changed.
func (s *Scheduler) lookBack() {
	select {
	case s.rebind <- struct{}{}:
	default:
	}
}

// Stop stops firing, cancels the running jobs' contexts and waits for
// them to return and record their outcome. A claim in flight is not cut
// off (at most 5s): a tick it wins is not run but handed back, its run row
// expired for the reaper of a live replica (in lease mode: its lease
// released).
func (s *Scheduler) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.stopped = true
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	if s.leader != nil {
		s.leader.close()
	}
}

// runStore is the run table of run-key and leader mode, nil in lease mode.
func (s *Scheduler) runStore() *Store {
	switch s.mode {
	case modeRunKey:
		return s.cfg.Store
	case modeLeader:
		s.leader.mu.Lock()
		defer s.leader.mu.Unlock()
		return s.leader.store
	}
	return nil
}

func (s *Scheduler) emit(e Event) {
	e.Node = s.cfg.Node
	if e.Kind == EventError || e.Kind == EventLost {
		s.log.Warn("schedule: "+string(e.Kind), "job", e.Job, "fire", e.Fire, "token", e.Token, "reason", e.Reason, "err", e.Err)
	} else {
		s.log.Debug("schedule: "+string(e.Kind), "job", e.Job, "fire", e.Fire, "token", e.Token, "reason", e.Reason, "err", e.Err)
	}
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(e)
	}
}

// job is a registered job and its runs on this node.
type job struct {
	Job
	sched Schedule
	s     *Scheduler
	bound *bound // a catalog job's binding; nil for a code job

	mu      sync.Mutex
	running map[*active]struct{}
	seen    time.Time // the last tick the loop handled
	// runCtx is the context of a catalog job's runs: the binder's. Its
	// loop's context ends at every rebind (an edit), and a run already
	// going must not end with it. Nil for a code job: its loop's.
	runCtx context.Context
}

// runContext is the context the job's runs start under, given the loop's.
func (j *job) runContext(loop context.Context) context.Context {
	if j.runCtx != nil {
		return j.runCtx
	}
	return loop
}

func (j *job) lastSeen() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seen
}

// key is the job's lease key in lease mode: its name, after its namespace
// unless that is the default one.
func (j *job) key() string {
	if j.s.ns == DefaultNamespace {
		return j.Name
	}
	return j.s.ns + "/" + j.Name
}

// active is a run in progress on this node.
type active struct {
	fire   time.Time
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// errReplaced is the cause of a replaced run's context.
var errReplaced = errors.New("schedule: run replaced by a later tick")

// maxDue bounds how many ticks one wake-up walks: a scheduler that was down
// for longer counts the rest as misfires without enumerating them.
const maxDue = 100_000

// loop fires the job's ticks until ctx ends.
func (j *job) loop(ctx context.Context) { j.loopFrom(ctx, time.Time{}) }

// loopFrom fires the job's ticks after from (now when zero, or the last
// run the store recorded when that is earlier) until ctx ends.
func (j *job) loopFrom(ctx context.Context, from time.Time) {
	clock := j.s.cfg.Clock
	last := clock.Now()
	if !from.IsZero() && from.Before(last) {
		last = from
	}
	if st := j.s.runStore(); st != nil {
		// Ticks since the last run any replica recorded (or, in leader
		// mode, the last tick any leader enqueued) are misfires.
		if prev, err := st.last(ctx, j.Name); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Reason: "read the last run", Err: err})
		} else if !prev.IsZero() && prev.Before(last) {
			last = prev
		}
	}
	for {
		next := j.sched.Next(last)
		if next.IsZero() {
			return
		}
		wake, stop := clock.Wake(next)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-wake:
		}
		now := clock.Now()
		var due []time.Time // the most recent CatchUpMax+1 due ticks
		skipped := 0
		for f := next; !f.IsZero() && !f.After(now); f = j.sched.Next(f) {
			due = append(due, f)
			if len(due) > j.CatchUpMax+1 {
				due = due[1:]
				skipped++
			}
			last = f
			if skipped+len(due) >= maxDue {
				last = now // give up enumerating: the rest are misfires too
				break
			}
		}
		ticks := j.plan(next, due, skipped, now)
		j.mu.Lock()
		j.seen = last
		j.mu.Unlock()
		for i, f := range ticks {
			done := j.fire(ctx, f, false)
			if done != nil && i < len(ticks)-1 && j.Overlap != OverlapAllow {
				// Catching up: one tick after the other, not overlapping.
				select {
				case <-done:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// plan applies the starting deadline and the misfire policy to the due
// ticks (oldest first; the skipped older ones, from first on, were not
// kept) and returns the ticks to fire. Whatever the policy, the ticks it
// drops are the oldest: its misfire event names the first and how many.
func (j *job) plan(first time.Time, due []time.Time, skipped int, now time.Time) []time.Time {
	var onTime, missed []time.Time
	for _, f := range due {
		if now.Sub(f) <= j.deadline(f) {
			onTime = append(onTime, f)
		} else {
			missed = append(missed, f)
		}
	}
	var run []time.Time
	dropped := skipped
	switch j.Misfire {
	case MisfireSkip:
		dropped += len(missed)
	case MisfireFireOnce:
		if len(missed) > 0 && len(onTime) == 0 {
			run = append(run, missed[len(missed)-1])
			dropped += len(missed) - 1
		} else {
			dropped += len(missed)
		}
	case MisfireCatchUp:
		keep := min(len(missed), j.CatchUpMax)
		dropped += len(missed) - keep
		run = append(run, missed[len(missed)-keep:]...)
	}
	if dropped > 0 {
		j.s.emit(Event{Kind: EventMisfired, Job: j.Name, Fire: first, Reason: fmt.Sprintf("%d ticks dropped by policy %s", dropped, j.Misfire), Attempt: dropped})
	}
	return append(run, onTime...)
}

// deadline is the tick's starting deadline.
func (j *job) deadline(f time.Time) time.Duration {
	if j.StartingDeadline > 0 {
		return j.StartingDeadline
	}
	d := 10 * time.Second
	if next := j.sched.Next(f); !next.IsZero() {
		d = min(d, next.Sub(f)/2)
	}
	return d
}

// retry spaces attempts at a store call that failed.
var retry = backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}

// fire runs tick f (a Catalog.RunNow's when oneOff) under the mode's
// exclusion. It returns a channel that is closed when the run ends, or nil
// when this node does not run it.
func (j *job) fire(ctx context.Context, f time.Time, oneOff bool) (done <-chan struct{}) {
	if !j.overlap(f) {
		return nil
	}
	var err error
	for attempt := 0; ; attempt++ {
		var retryable bool
		switch j.s.mode {
		case modeRunKey:
			done, retryable, err = j.fireRunKey(ctx, f, oneOff)
		case modeLease:
			done, retryable, err = j.fireLease(ctx, f, oneOff)
		case modeLeader:
			retryable, err = j.fireLeader(ctx, f, oneOff)
		}
		if err == nil || !retryable || ctx.Err() != nil {
			break
		}
		if isReadOnly(err) {
			// A hot standby: this replica's region is not the primary's.
			// Not retried: the primary's replicas run the tick; this one
			// runs the next ticks once its server is promoted.
			j.s.metrics.notPrimary.Inc()
			j.s.emit(Event{Kind: EventNotPrimary, Job: j.Name, Fire: f, Reason: "the store is a read-only standby: this replica is not the primary's and runs nothing", Err: err})
			return nil
		}
		// The store is unreachable: fail closed, and retry while the tick
		// is on time.
		j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
		if j.s.cfg.Clock.Now().Sub(f) > j.startBy(f, oneOff) {
			j.s.emit(Event{Kind: EventMisfired, Job: j.Name, Fire: f, Reason: "the store did not answer before the starting deadline", Err: err, Attempt: 1})
			return nil
		}
		t := time.NewTimer(retry.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	if err != nil && ctx.Err() == nil {
		j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
	}
	return done
}

// overlap applies the overlap policy to this node's runs of the job and
// reports whether the tick may go on.
func (j *job) overlap(f time.Time) bool {
	j.mu.Lock()
	var prev []*active
	for a := range j.running {
		prev = append(prev, a)
	}
	j.mu.Unlock()
	if len(prev) == 0 {
		return true
	}
	switch j.Overlap {
	case OverlapForbid:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "overlap forbid: a run of the job is still going on this node"})
		return false
	case OverlapReplace:
		if j.s.mode != modeLease {
			// Run-key mode cancels the predecessors once the replace
			// statement has ended their rows (cancelReplaced): cancelled
			// first, a predecessor could record its end before the replace,
			// and its row said failed, not replaced.
			return true
		}
		for _, a := range prev {
			a.cancel(errReplaced)
		}
		// The job's lease is released when the predecessor returns.
		for _, a := range prev {
			select {
			case <-a.done:
			case <-time.After(j.LockAtMostFor):
			}
		}
	}
	return true
}

// cancelReplaced cancels this node's runs of the job older than f, whose
// rows the replace statement has ended.
func (j *job) cancelReplaced(f time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for a := range j.running {
		if a.fire.Before(f) {
			a.cancel(errReplaced)
		}
	}
}

// fireRunKey claims tick f's run row and runs it if this node won.
func (j *job) fireRunKey(ctx context.Context, f time.Time, oneOff bool) (done <-chan struct{}, retryable bool, err error) {
	st := j.s.cfg.Store
	start := time.Now() // before the claim is sent: the local deadline's start
	cctx, cancel := claimContext(ctx)
	var (
		c            claimed
		token        aegis.Token
		state        string
		won, refused bool
	)
	if j.bound != nil {
		c, token, state, won, refused, err = j.s.claimCatalog(cctx, j, f, oneOff, j.LockAtMostFor, j.Overlap == OverlapForbid)
	} else {
		token, state, won, err = st.claim(cctx, j.Name, f, j.s.cfg.Node, j.LockAtMostFor, j.Overlap == OverlapForbid)
	}
	cancel()
	if err != nil {
		return nil, true, err
	}
	switch {
	case refused:
		j.s.emit(Event{Kind: EventRefused, Job: j.Name, Fire: f, Reason: refusal(oneOff)})
		j.s.lookBack()
		return nil, false, nil
	case won && state == "running" && j.runContext(ctx).Err() != nil:
		j.s.handBack(ctx, j.Name, f, token)
		return nil, false, nil
	case !won:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "another node has the tick"})
		return nil, false, nil
	case state == "skipped":
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Token: token, Reason: "overlap forbid: a run of the job is still going"})
		return nil, false, nil
	}
	if j.Overlap == OverlapReplace {
		if n, err := st.replace(ctx, j.Name, f); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
		} else if n > 0 {
			j.s.emit(Event{Kind: EventRun, Job: j.Name, Fire: f, Token: token, Reason: fmt.Sprintf("replaced %d running predecessors", n)})
		}
		// A predecessor on this node stops now (one elsewhere learns at its
		// next heartbeat). After a failed replace it stops too: the tick
		// replaces it either way, and its later writes carry the older
		// token.
		j.cancelReplaced(f)
	}
	return j.startRunKey(j.runContext(ctx), f, token, 1, start, c), false, nil
}

// startRunKey runs a claimed (or reclaimed) run row in a goroutine; c is
// what a catalog job's claim read from its row.
func (j *job) startRunKey(ctx context.Context, f time.Time, token aegis.Token, attempt int, start time.Time, c claimed) <-chan struct{} {
	st := j.s.cfg.Store
	lease := &aegis.Lease{Key: j.Name, Token: token, Owner: j.s.cfg.Node, TTL: j.LockAtMostFor, Deadline: aegis.LocalDeadline(start, j.LockAtMostFor)}
	run := Run{Job: j.Name, Namespace: j.s.ns, Fire: f, Node: j.s.cfg.Node, Token: token, Attempt: attempt, Args: c.args, Version: c.version}
	return j.launch(ctx, run, lease, start.Add(j.LockAtMostFor), &runRow{s: st, job: j.Name, fire: f}, func(jobErr error, held *aegis.Held) {
		state, text := "succeeded", ""
		if jobErr != nil {
			state, text = "failed", jobErr.Error()
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if held != nil {
			_ = held.Release(fctx) // stops the heartbeat; a run row's Release writes nothing
		}
		if err := st.finish(fctx, j.Name, f, token, state, text); errors.Is(err, aegis.ErrLost) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "the run was reclaimed or replaced: its outcome is not recorded", Err: err})
		} else if err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: token, Err: err})
		} else if err := st.prune(fctx, j.Name, f.Add(-j.s.cfg.Retention)); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "prune", Err: err})
		}
	})
}

// fireLease runs tick f under the job's lease, if this node acquires it.
func (j *job) fireLease(ctx context.Context, f time.Time, oneOff bool) (done <-chan struct{}, retryable bool, err error) {
	locker := j.s.cfg.Locker
	key := j.key()
	if j.Overlap == OverlapAllow {
		key += "@" + f.UTC().Format(time.RFC3339Nano)
	}
	start := time.Now()
	cctx, cancel := claimContext(ctx)
	lease, err := locker.TryAcquire(cctx, key, j.LockAtMostFor)
	cancel()
	if err == nil && j.runContext(ctx).Err() != nil {
		// Stopping: run nothing new, and free the key at once.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := locker.Release(rctx, lease); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: lease.Token, Reason: "release a lease acquired while stopping", Err: err})
		}
		return nil, false, nil
	}
	if errors.Is(err, aegis.ErrHeld) {
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "the job's lease is held"})
		return nil, false, nil
	}
	if err != nil {
		return nil, !errors.Is(err, aegis.ErrInvalid), err
	}
	if late := j.s.cfg.Clock.Now().Sub(f); late > j.startBy(f, oneOff) {
		// A grant that came this late (the lease server was slow, or a
		// row lock held it up) may follow another replica's whole run of
		// the tick, its lease released after LockAtLeastFor: running it
		// now would run the tick twice.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = locker.Release(rctx, lease)
		j.s.emit(Event{Kind: EventMisfired, Job: j.Name, Fire: f, Token: lease.Token, Attempt: 1,
			Reason: fmt.Sprintf("the lease was granted %s after the fire time, past the starting deadline %s: another replica may have run the tick", late.Round(time.Millisecond), j.startBy(f, oneOff))})
		return nil, false, nil
	}
	var c claimed
	if j.bound != nil {
		// The catalog half of the claim, once the lease is ours: a pause
		// or delete that committed before it is seen. A run now is taken:
		// the lease alone would not keep a replica that saw the request
		// after another's run had ended from running it again.
		var ok bool
		cctx, cancel := claimContext(ctx)
		if oneOff {
			c, ok, err = j.s.takeRunNow(cctx, j, f)
		} else {
			c, ok, err = j.s.checkCatalog(cctx, j.s.cfg.Catalog.db, j, f, false)
		}
		cancel()
		if err != nil || !ok {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = locker.Release(rctx, lease)
		}
		if err != nil {
			return nil, true, err
		}
		if !ok && oneOff {
			j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "another replica took the run now, a later RunNow replaced it, or the schedule was paused or deleted"})
			return nil, false, nil
		}
		if !ok {
			j.s.emit(Event{Kind: EventRefused, Job: j.Name, Fire: f, Reason: refusal(false)})
			j.s.lookBack()
			return nil, false, nil
		}
	}
	run := Run{Job: j.Name, Namespace: j.s.ns, Fire: f, Node: j.s.cfg.Node, Token: lease.Token, Attempt: 1, Args: c.args, Version: c.version}
	done = j.launch(j.runContext(ctx), run, lease, start.Add(j.LockAtMostFor), locker, func(jobErr error, held *aegis.Held) {
		// ShedLock's lockAtLeastFor: keep the lease until start+LockAtLeastFor.
		keep := j.LockAtLeastFor - time.Since(start)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var err error
		switch {
		case held != nil:
			err = held.ReleaseAfter(fctx, keep) // a keep too short to renew for releases
		case aegis.CheckTTL(keep, 0) == nil: // else too short to renew for: release
			err = locker.Renew(fctx, lease, keep)
		default:
			err = locker.Release(fctx, lease)
		}
		if errors.Is(err, aegis.ErrLost) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: f, Token: lease.Token, Reason: "the lease had expired when the run ended", Err: err})
		} else if err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: lease.Token, Reason: "release", Err: err})
		}
	})
	return done, false, nil
}

// launch runs the job in a goroutine under lease (kept alive through
// keeper unless keep-alive is off; until is when it expires unless
// renewed), then calls end with the job's error and the keep-alive (nil
// without), which end must release.
func (j *job) launch(ctx context.Context, run Run, lease *aegis.Lease, until time.Time, keeper aegis.Locker, end func(error, *aegis.Held)) <-chan struct{} {
	rctx, cancel := context.WithCancelCause(ctx)
	a := &active{fire: run.Fire, cancel: cancel, done: make(chan struct{})}
	j.mu.Lock()
	j.running[a] = struct{}{}
	j.mu.Unlock()
	j.s.emit(Event{Kind: EventRun, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Until: until})
	j.s.metrics.runs.Inc()
	j.s.wg.Go(func() {
		defer close(a.done)
		var (
			jctx context.Context
			held *aegis.Held
			rk   *renewals
		)
		if j.DisableKeepAlive {
			var stop context.CancelFunc
			jctx, stop = context.WithDeadlineCause(rctx, lease.Deadline, fmt.Errorf("%w: LockAtMostFor passed without keep-alive", aegis.ErrLost))
			defer stop()
		} else {
			// The lease outlives a cancelled run until the job returns (a
			// job may ignore its context): end releases it.
			rk = &renewals{Locker: keeper, j: j, run: run}
			rk.running.Store(true)
			held = aegis.Keep(context.WithoutCancel(rctx), rk, lease)
			var jcancel context.CancelCauseFunc
			jctx, jcancel = context.WithCancelCause(held.Context())
			defer jcancel(nil)
			defer context.AfterFunc(rctx, func() { jcancel(context.Cause(rctx)) })()
		}
		jctx = context.WithValue(jctx, runKey{}, run)
		if j.s.mode == modeLease {
			jctx = context.WithValue(jctx, leaseKey{}, *lease)
		}
		jobErr := j.call(jctx)
		if rk != nil {
			rk.running.Store(false) // end's LockAtLeastFor renewal is no keep-alive
		}
		if cause := context.Cause(jctx); errors.Is(cause, aegis.ErrLost) || errors.Is(cause, errReplaced) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Err: cause})
		}
		end(jobErr, held)
		cancel(nil)
		// Off the running set before Done is announced: a run reported
		// done never makes a later tick an overlap.
		j.mu.Lock()
		delete(j.running, a)
		j.mu.Unlock()
		j.s.emit(Event{Kind: EventDone, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Err: jobErr})
	})
	return a.done
}

// renewals reports each keep-alive renewal of a running run as
// EventRenewed.
type renewals struct {
	aegis.Locker
	j       *job
	run     Run
	running atomic.Bool
}

func (r *renewals) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	start := time.Now()
	err := r.Locker.Renew(ctx, l, ttl)
	if err == nil && r.running.Load() {
		r.j.s.emit(Event{Kind: EventRenewed, Job: r.run.Job, Fire: r.run.Fire, Token: r.run.Token, Attempt: r.run.Attempt, Until: start.Add(ttl)})
	}
	return err
}

// call runs the job, turning a panic into an error.
func (j *job) call(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("schedule: job %q panicked: %v\n%s", j.Name, p, debug.Stack())
		}
	}()
	return j.Run(ctx)
}

// claimTimeout bounds a claim that Stop does not cut off.
const claimTimeout = 5 * time.Second

// claimContext is the context of a claim (a run row's insert or reclaim, a
// lease's grant): Stop does not cancel it, so its outcome is known. A
// cancelled commit can land in the store and still report an error: the
// row (or lease) then said this node ran a tick that it never started,
// and blocked the tick until its expiry (SQLite showed it, about one stop
// in twenty that came during a claim).
func claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
}

// handBack gives a run row claimed while stopping to the reapers: its
// expiry is now, so a live replica's reaper runs the tick (with a greater
// token) at its next pass, instead of after LockAtMostFor.
func (s *Scheduler) handBack(ctx context.Context, job string, f time.Time, token aegis.Token) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.handBack(hctx, job, f, token); err != nil {
		s.emit(Event{Kind: EventError, Job: job, Fire: f, Token: token, Reason: "hand back a run claimed while stopping", Err: err})
		return
	}
	s.emit(Event{Kind: EventSkipped, Job: job, Fire: f, Token: token, Reason: "stopping: the run is handed back to the reapers"})
}

// reap retries the crashed runs of this scheduler's jobs in run-key mode.
func (s *Scheduler) reap(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if gone := s.goneNames(); len(gone) > 0 {
			// A crashed run of a paused or deleted schedule is not retried:
			// no claim may start after the pause, a reclaim included. Its
			// row says so instead of staying running.
			if n, err := s.cfg.Store.abandon(ctx, gone); err != nil && ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Reason: "reaper: abandon the crashed runs of paused or deleted schedules", Err: err})
			} else if n > 0 {
				s.emit(Event{Kind: EventReclaim, Reason: fmt.Sprintf("abandoned %d crashed runs of paused or deleted catalog schedules", n)})
			}
		}
		jobs := make(map[string]*job)
		var names []string
		for _, j := range s.reapable() {
			jobs[j.Name] = j
			names = append(names, j.Name)
		}
		if len(names) == 0 {
			continue
		}
		runs, err := s.cfg.Store.expired(ctx, names)
		if err != nil {
			if ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Reason: "reaper", Err: err})
			}
			continue
		}
		for _, r := range runs {
			j, f := jobs[r.job], r.fire
			if ctx.Err() != nil {
				return
			}
			start := time.Now()
			cctx, cancel := claimContext(ctx)
			token, state, attempt, ok, err := s.cfg.Store.reclaim(cctx, j.Name, f, s.cfg.Node, j.LockAtMostFor, j.MaxAttempts)
			cancel()
			switch {
			case isReadOnly(err): // a standby: the primary's reapers retry it
			case err != nil:
				s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "reaper", Err: err})
			case !ok:
			case state == "running" && ctx.Err() != nil:
				s.handBack(ctx, j.Name, f, token)
			case state == "running":
				s.emit(Event{Kind: EventReclaim, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "retrying a crashed run"})
				var c claimed
				if j.bound != nil {
					c = claimed{args: j.bound.args, version: j.bound.version}
				}
				j.startRunKey(ctx, f, token, attempt, start, c)
			default:
				s.emit(Event{Kind: EventReclaim, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "abandoned: out of attempts, or a later tick started"})
			}
		}
	}
}
