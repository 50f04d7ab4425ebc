package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/node"
	"github.com/aegislab/aegis/tracing"
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
	// TracerProvider, when set, traces the scheduler (package tracing's
	// conventions): a span per tick this replica handles
	// (aegis.schedule.fire, its claim inside), and a span per run
	// (aegis.schedule.run: a trace of its own, linked to the claim's span,
	// with the job's name, the run's token, attempt and node), which the
	// job's context carries, so that the job's fenced writes are its
	// children. In run-key mode a sampled run's trace id is written on its
	// attempt (Attempt.TraceID). Nil traces nothing.
	TracerProvider trace.TracerProvider
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
	EventMissed   EventKind = "missed"   // a tick no replica started by its starting deadline, recorded by this replica (Cause: why)
	EventTwice    EventKind = "twice"    // a later attempt took this run's tick while it went on: the tick ran twice, and the store refused this run's outcome (after EventLost)

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
	// Cause is, on EventMissed, why the tick was missed.
	Cause MissCause
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
	claim   claimer // the mode's, chosen in New
	log     *slog.Logger
	ns      string
	metrics *metrics

	handlers map[string]Handler   // catalog handlers by name
	rebind   chan struct{}        // asks the binder to read the catalog now
	boundJob []*job               // the catalog jobs bound now (the reaper's)
	ticks    map[string]time.Time // the last tick an unbound catalog job's loop saw
	gone     map[string]bool      // catalog schedules paused or deleted: the reaper abandons their crashed runs
	misses   *misses              // the missed ticks' sweep (missed.go)
	tracer   trace.Tracer         // nil: no tracing

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
		rebind: make(chan struct{}, 1), ready: make(chan struct{}), ticks: make(map[string]time.Time), gone: make(map[string]bool), ns: DefaultNamespace,
		misses: &misses{notes: make(map[string][]missNote), swept: make(map[string]time.Time)},
		tracer: tracing.Tracer(c.TracerProvider, "github.com/aegislab/aegis/schedule")}
	set := 0
	for _, ok := range []bool{c.Store != nil, c.Locker != nil, c.Leader != nil} {
		if ok {
			set++
		}
	}
	// The one place the mode is decided. Each constructor sets the
	// scheduler's namespace (setNamespace) from its Config.
	var err error
	switch {
	case set > 1:
		return nil, invalid("schedule: set one of Config.Store (run-key mode), Config.Locker (lease mode) and Config.Leader (leader mode), not several")
	case c.Store != nil:
		s.claim, err = newRunKeyClaimer(s)
	case c.Locker != nil:
		s.claim, err = newLeaseClaimer(s)
	case c.Leader != nil:
		s.claim, err = newLeaderClaimer(s)
	default:
		return nil, invalid("schedule: none of Config.Store (run-key mode), Config.Locker (lease mode) and Config.Leader (leader mode) is set")
	}
	if err != nil {
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
	v, sched, err := j.validate(s.claim)
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
	s.metrics.series(j.Name) // its series, at zero, before its first tick
	s.jobs = append(s.jobs, &job{Job: v, sched: sched, s: s, running: make(map[*active]struct{})})
	return nil
}

// Start starts a goroutine per job (and the reaper in run-key mode). The
// jobs stop when ctx ends or Stop is called. Start may be called once: a
// second call is an error, and so is a call after Stop (wrapping
// aegis.ErrInvalid: a Scheduler cannot be restarted, make a new one).
//
// In leader mode it creates the missing tables (ctx bounds that), then
// campaigns in a goroutine: while this replica leads, its job loops
// enqueue the ticks; when leadership ends it campaigns again.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	err := s.startableLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.claim.prepare(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startableLocked(); err != nil { // again: a Stop or Start may have come during prepare
		return err
	}
	s.started = true
	s.startedAt = s.cfg.Clock.Now()
	own := s.claim.ownsLoops()
	if s.cfg.Catalog == nil || own {
		// Ready now: nothing to bind, or the mode binds the catalog itself
		// (the leader, when it is elected).
		s.readyOnce.Do(func() { close(s.ready) })
	}
	ctx, s.cancel = context.WithCancel(ctx)
	if s.cfg.Catalog != nil {
		s.wg.Go(func() { s.beat(ctx) })
	}
	s.claim.start(ctx)
	if st := s.claim.runStore(); st != nil {
		s.wg.Go(func() { s.sweepMissed(ctx, st) })
	}
	if own {
		return nil
	}
	if s.cfg.Catalog != nil {
		s.wg.Go(func() { s.bind(ctx) })
	}
	for _, j := range s.jobs {
		// Its ticks from Start on are its loop's, however late its
		// goroutine runs: the loop fires them or notes why not, and the
		// sweep leaves them to it (job.settled) from now.
		j.mu.Lock()
		j.settled, j.looping = s.startedAt, true
		j.mu.Unlock()
		s.wg.Go(func() { j.loopFrom(ctx, s.startedAt) })
	}
	return nil
}

// errStopped is Start's error after Stop.
var errStopped = invalid("schedule: Start: the scheduler was stopped; a Scheduler cannot be restarted: make a new one")

// startableLocked says why Start cannot start s: it was stopped, or
// started.
func (s *Scheduler) startableLocked() error {
	switch {
	case s.stopped:
		return errStopped
	case s.started:
		return errors.New("schedule: Start called twice")
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

// Mode is the scheduler's mode: which of Config.Store, Config.Locker and
// Config.Leader it was given.
func (s *Scheduler) Mode() Mode { return s.claim.mode() }

// setNamespace sets the scheduler's namespace: its Catalog's, which the
// namespace of the mode's run table (other, named by field; "" for none)
// must equal.
func (s *Scheduler) setNamespace(other, field string) error {
	if c := s.cfg.Catalog; c != nil {
		if other != "" && other != c.ns {
			return invalid("schedule: the Catalog's namespace %q is not %s %q: one scheduler runs one namespace", c.ns, field, other)
		}
		s.ns = c.ns
	} else if other != "" {
		s.ns = other
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
	s.claim.close()
}

func (s *Scheduler) emit(e Event) {
	e.Node = s.cfg.Node
	if e.Kind == EventError || e.Kind == EventLost {
		s.log.Warn("schedule: "+string(e.Kind), "job", e.Job, "fire", e.Fire, "token", e.Token, "reason", e.Reason, "err", e.Err)
	} else {
		s.log.Debug("schedule: "+string(e.Kind), "job", e.Job, "fire", e.Fire, "token", e.Token, "reason", e.Reason, "err", e.Err)
	}
	s.metrics.observe(e)
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(e)
	}
}
