package runner

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// Run is one scenario run in progress: its node processes, its proxies,
// its faults and its events. Start one with [Session.Start]; watch it with
// Subscribe and Status; inject faults with Inject; wait for its Report.
type Run struct {
	ID    string
	cfg   lab.Config
	strat lab.Strategy
	s     *Session
	db    *sql.DB
	store string // the store URL nodes get (through their proxy)
	start time.Time

	stop     chan struct{} // closed when the run ends or is stopped
	stopOnce sync.Once
	chaos    sync.WaitGroup // fault goroutines; added to under mu while !chaosShut
	bg       sync.WaitGroup // the run's other goroutines
	done     chan struct{}
	report   *lab.Report
	err      error

	mu         sync.Mutex
	chaosShut  bool // the supervisor waits for the faults: Inject adds none
	events     []lab.Event
	changed    chan struct{} // closed and replaced at each event
	nodes      []*nodeProc
	jobs       []lab.JobSpec
	catalog    *schedule.Catalog // the run's namespace: the lab's edits
	effective  time.Time         // when the catalog's rows take effect
	standbyURL string            // the second region's store: a hot standby (Config.Standby)
	edits      []lab.CatalogEdit // the edit faults applied, in order
	sections   map[string]*sectionRecord
	order      []string // section ids in order of enter
	claims     []claimRecord
	executed   map[jobTick]int
	entered    map[jobTick]int
	stale      int
	missed     map[jobTick]bool
	deferred   map[jobTick]bool   // window ended while an attempt was still inside: missed if it does not commit
	open       map[string]openRun // runs begun and not ended, by runKey
	waiters    []*waiter
	struck     map[string]bool // the commits (attempts) a committer fault took
	notes      []string
	// configExits are the nodes that exited on their configuration
	// (lab.NodeExitConfig) and unapplied the faults that did not happen,
	// each a line of the report's Inconclusive.
	configExits []string
	unapplied   []string
	failedOver  bool
	promotedAt  time.Time // when promote:standby began (stopped the primary): the second region was on a standby until then
	// serverFault: a fault reached every node (a server's, or latency):
	// their late ticks are its doing.
	serverFault bool
	fired       int  // the last tick that fired
	stopped     bool // the run was stopped before its end
}

type waiter struct {
	match func(lab.Event) bool
	ch    chan lab.Event
}

// Start starts a run: it starts the servers the strategy needs (the
// first time), the proxies and the node processes, and returns once the
// nodes are ready and the first tick is scheduled. The run goes on until
// its ticks are done, ctx ends, or Stop.
func (s *Session) Start(ctx context.Context, cfg lab.Config) (*Run, error) {
	if err := s.check(ctx, cfg); err != nil {
		return nil, err
	}
	db, storeURL, err := s.openStore(ctx)
	if err != nil {
		return nil, err
	}
	r := s.newRun(cfg, db, storeURL)
	// Admitted and registered in one step: no other run of the session
	// starts between the check and the registration.
	if err := s.admit(r); err != nil {
		return nil, err
	}
	forget := func() {
		s.release(r)
		s.mu.Lock()
		delete(s.runs, r)
		s.mu.Unlock()
	}
	if err := r.putCatalog(ctx); err != nil {
		forget()
		return nil, err
	}
	if cfg.Standby > 0 {
		if err := r.prepareStandby(ctx); err != nil {
			forget()
			return nil, err
		}
	}
	if err := r.startNodes(ctx); err != nil {
		r.Stop()
		r.stopNodes()
		r.closeProxies()
		forget()
		return nil, err
	}
	// Stop the run when ctx ends (Ctrl-C).
	r.bg.Go(func() {
		select {
		case <-ctx.Done():
			r.Stop()
		case <-r.done:
		}
	})
	r.bg.Go(func() {
		r.supervise()
		forget()
	})
	return r, nil
}

// check admits cfg into the session: valid, the session open, the
// strategy available, and its faults ones the session can apply.
func (s *Session) check(ctx context.Context, cfg lab.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("lab: session closed")
	}
	if err := s.Availability(ctx, cfg.Strategy); err != nil {
		return &UnavailableError{Strategy: cfg.Strategy, Err: err}
	}
	for _, ch := range cfg.Chaos {
		if err := s.admitChaos(ch); err != nil {
			return err
		}
	}
	return nil
}

// newRun is a run of cfg on the store db (at storeURL), with a new ID,
// before its nodes start.
func (s *Session) newRun(cfg lab.Config, db *sql.DB, storeURL string) *Run {
	strat, _ := lab.LookupStrategy(cfg.Strategy)
	var id [4]byte
	_, _ = rand.Read(id[:])
	return &Run{
		ID:       time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(id[:]),
		cfg:      cfg,
		strat:    strat,
		s:        s,
		db:       db,
		store:    storeURL,
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		stop:     make(chan struct{}),
		jobs:     cfg.Jobs(),
		sections: map[string]*sectionRecord{},
		executed: map[jobTick]int{},
		entered:  map[jobTick]int{},
		missed:   map[jobTick]bool{},
		deferred: map[jobTick]bool{},
		open:     map[string]openRun{},
	}
}

// prepareStandby starts the session's hot standby and waits until it has
// what the second region's nodes read.
func (r *Run) prepareStandby(ctx context.Context) error {
	standby, err := r.s.startStandby(ctx)
	if err != nil {
		return err
	}
	// The run table, which a standby cannot create.
	if _, err := schedule.NewStore(ctx, r.db, &schedule.StoreConfig{Namespace: lab.Namespace(r.ID)}); err != nil {
		return err
	}
	if r.strat.Mode == schedule.ModeLeader {
		// And leader mode's: the election's lease table and the queue's.
		if err := migrateLeader(ctx, r.s.pg.URL()); err != nil {
			return err
		}
	}
	// The catalog's rows and the ledgers reach the standby before its
	// nodes read them.
	if err := standby.WaitReplayed(ctx, r.s.pg); err != nil {
		return err
	}
	r.standbyURL = standby.URL()
	return nil
}

// migrateLeader creates, on the PostgreSQL at url, the tables a
// leader-mode node migrates when it opens them: a node on a standby can
// only find them there.
func migrateLeader(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pglease.Migrate(ctx, pool, nil); err != nil {
		return err
	}
	return queue.Migrate(ctx, pool)
}

// UnavailableError says that a strategy cannot run in this session, and
// why: a backend missing from the build, a server program that is not
// installed (with its Debian package), PostgreSQL missing.
type UnavailableError struct {
	Strategy string
	Err      error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("strategy %s is unavailable: %v", e.Strategy, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Config returns the run's configuration.
func (r *Run) Config() lab.Config { return r.cfg }

// StartTime returns when the run's first tick fired.
func (r *Run) StartTime() time.Time { return r.start }

// Done is closed when the run has ended and its report is ready.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait waits for the run to end and returns its report.
func (r *Run) Wait(ctx context.Context) (*lab.Report, error) {
	select {
	case <-r.done:
		return r.report, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stop aborts the run: the nodes are told to stop, paused ones resumed,
// faults ended. The report covers what happened until then.
func (r *Run) Stop() { r.stopOnce.Do(func() { close(r.stop) }) }

// ending reports whether the run is ending (stopped, or over).
func (r *Run) ending() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// lifetime returns a context that ends when the run ends or is stopped:
// the bound of its faults and tick marks.
func (r *Run) lifetime() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-r.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// Events returns a copy of the events so far.
func (r *Run) Events() []lab.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Subscribe returns a channel that receives every event from the from-th
// (0: all of them, replayed) on, in order and without loss, and is closed
// when the run ends (after its last event, at once when from is past it)
// or cancel is called. A slow
// reader slows only itself.
func (r *Run) Subscribe(from int) (<-chan lab.Event, func()) {
	out := make(chan lab.Event, 64)
	stop := make(chan struct{})
	var once sync.Once
	cancel := func() { once.Do(func() { close(stop) }) }
	r.bg.Go(func() {
		defer close(out)
		i := max(from, 0)
		for {
			r.mu.Lock()
			batch := slices.Clone(r.events[min(i, len(r.events)):])
			changed := r.changed
			r.mu.Unlock()
			for _, e := range batch {
				select {
				case out <- e:
				case <-stop:
					return
				}
			}
			i += len(batch)
			select {
			case <-changed:
			case <-stop:
				return
			case <-r.done:
				r.mu.Lock()
				n := len(r.events)
				r.mu.Unlock()
				// from may lie past the last event: none is left to send.
				if i >= n {
					return
				}
			}
		}
	})
	return out, cancel
}

// NodeStatus is a node's state at one moment.
type NodeStatus struct {
	Node        int    `json:"node"`
	Pid         int    `json:"pid"`
	Incarnation int    `json:"incarnation"`
	State       string `json:"state"` // starting, running, paused, partitioned, killed, finished, exited
	// Token is the token of the lease or claim it holds, 0 for none.
	Token int64 `json:"token"`
	// Critical is the attempt it has inside the critical section.
	Critical string `json:"critical,omitempty"`
	Skew     string `json:"skew,omitempty"`
}

// Status is a run's state at one moment, for a dashboard.
type Status struct {
	Run     string       `json:"run"`
	Elapsed float64      `json:"elapsed_s"`
	Done    bool         `json:"done"`
	Holder  int          `json:"holder"` // the node inside the critical section (or holding the lease), 0 none
	Token   int64        `json:"token"`
	Job     string       `json:"job,omitempty"` // the holder's job
	Nodes   []NodeStatus `json:"nodes"`
	// The report's counts so far, from the events (the final report
	// reads the store).
	Executions        int `json:"executions"`
	DuplicateTicks    int `json:"duplicate_ticks"`
	DuplicatesApplied int `json:"duplicates_applied"`
	StaleRejected     int `json:"stale_rejected"`
	MissedTicks       int `json:"missed_ticks"`
}

// Status returns the run's state now.
func (r *Run) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Run: r.ID, Elapsed: r.secs(time.Now().UnixNano()), StaleRejected: r.stale, MissedTicks: len(r.missed)}
	select {
	case <-r.done:
		st.Done = true
	default:
	}
	for _, np := range r.nodes {
		ns := NodeStatus{Node: np.n, Incarnation: np.cfg.Incarnation, State: "running", Critical: np.critical}
		if np.cmd != nil && np.cmd.Process != nil {
			ns.Pid = np.cmd.Process.Pid
		}
		if np.cfg.Skew != 0 {
			ns.Skew = np.cfg.Skew.String()
		}
		if np.holding > 0 {
			ns.Token = np.holding
		}
		switch {
		case np.paused:
			ns.State = "paused"
		case np.killed:
			ns.State = "killed"
		case np.finished:
			ns.State = "finished"
		case np.proxies != nil && r.partitionedLocked(np):
			ns.State = "partitioned"
		}
		if (np.critical != "" || np.holding >= 0) && st.Holder == 0 {
			st.Holder, st.Token = np.n, max(np.holding, 0)
		}
		st.Nodes = append(st.Nodes, ns)
	}
	for _, n := range r.entered {
		st.Executions += n
		if n > 1 {
			st.DuplicateTicks++
		}
	}
	st.Job = r.holderJobLocked()
	for _, n := range r.executed {
		if n > 1 {
			st.DuplicatesApplied++
		}
	}
	return st
}

func (r *Run) partitionedLocked(np *nodeProc) bool {
	for _, ps := range np.proxies {
		for _, p := range ps {
			if p.IsCut() {
				return true
			}
		}
	}
	return false
}

// secs converts a Unix-nanosecond time to seconds since the first tick,
// to the millisecond.
func (r *Run) secs(at int64) float64 {
	if r.start.IsZero() {
		return 0
	}
	return math.Round(float64(at-r.start.UnixNano())/1e6) / 1e3
}

// add records an event and wakes subscribers and waiters. Caller holds mu.
func (r *Run) addLocked(e lab.Event) {
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		if w.match(e) {
			w.ch <- e // buffered, used once
			continue
		}
		kept = append(kept, w)
	}
	r.waiters = kept
}

func (r *Run) labEvent(e lab.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.T = r.secs(time.Now().UnixNano())
	r.addLocked(e)
}

// note records a warning for the report.
func (r *Run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// notApplied records for the report that fault ch did not happen: err
// came before it began (no target, nothing to lose).
func (r *Run) notApplied(ch lab.Chaos, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unapplied = append(r.unapplied, fmt.Sprintf("%s: %v", ch, err))
}

// waitEvent waits for the next event that matches, until ctx ends.
func (r *Run) waitEvent(ctx context.Context, match func(lab.Event) bool) (lab.Event, error) {
	r.mu.Lock()
	w := r.addWaiterLocked(match)
	r.mu.Unlock()
	return r.waitOn(ctx, w)
}

// addWaiterLocked registers a waiter for the next event that matches:
// under the same lock as a look at the events so far, none is missed in
// between. Caller holds mu.
func (r *Run) addWaiterLocked(match func(lab.Event) bool) *waiter {
	w := &waiter{match: match, ch: make(chan lab.Event, 1)}
	r.waiters = append(r.waiters, w)
	return w
}

// waitOn waits for w's event until ctx ends, then forgets w.
func (r *Run) waitOn(ctx context.Context, w *waiter) (lab.Event, error) {
	select {
	case e := <-w.ch:
		return e, nil
	case <-ctx.Done():
		r.mu.Lock()
		r.waiters = slices.DeleteFunc(r.waiters, func(x *waiter) bool { return x == w })
		r.mu.Unlock()
		select {
		case e := <-w.ch:
			return e, nil
		default:
		}
		return lab.Event{}, ctx.Err()
	}
}
