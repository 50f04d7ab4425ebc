package lab

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aegislab/aegis/internal/servers"
	"github.com/aegislab/aegis/internal/tcpproxy"
	"github.com/aegislab/aegis/schedule"
)

// Run is one scenario run in progress: its node processes, its proxies,
// its faults and its events. Start one with [Session.Start]; watch it with
// Subscribe and Status; inject faults with Inject; wait for its Report.
type Run struct {
	ID    string
	cfg   Config
	strat Strategy
	s     *Session
	db    *sql.DB
	store string // the store URL nodes get (through their proxy)
	start time.Time

	ctx    context.Context // ends when the run ends or is stopped
	cancel context.CancelFunc
	chaos  sync.WaitGroup // fault goroutines
	bg     sync.WaitGroup // the run's other goroutines
	done   chan struct{}
	report *Report
	err    error

	mu         sync.Mutex
	events     []Event
	changed    chan struct{} // closed and replaced at each event
	nodes      []*nodeProc
	jobs       []JobSpec
	catalog    *schedule.Catalog // the run's namespace: the lab's edits
	effective  time.Time         // when the catalog's rows take effect
	standbyURL string            // the second region's store: a hot standby (Config.Standby)
	edits      []catalogEdit     // the edit faults applied, in order
	sections   map[string]*sectionRecord
	order      []string // section ids in order of enter
	claims     []claimRecord
	executed   map[jobTick]int
	entered    map[jobTick]int
	stale      int
	missed     map[jobTick]bool
	waiters    []*waiter
	notes      []string
	failedOver bool
	fired      int  // the last tick that fired
	stopped    bool // the run was stopped before its end
}

// nodeProc is one node: its current process and its proxies.
type nodeProc struct {
	n       int
	cfg     NodeConfig
	env     []string
	proxies map[servers.Kind][]*tcpproxy.Proxy

	// The current process, guarded by Run.mu.
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	ready    chan struct{}
	exited   chan struct{}
	finished bool
	killed   bool // the exit was a fault's doing
	paused   bool
	critical string // the attempt inside the critical section
	writing  bool   // and it is writing: its work is done
	holding  int64  // the token held, or -1 when holding nothing
	tick     int
	job      string
	lastErr  string // the detail of its last error event
}

type waiter struct {
	match func(Event) bool
	ch    chan Event
}

// Start starts a run: it starts the servers the strategy needs (the
// first time), the proxies and the node processes, and returns once the
// nodes are ready and the first tick is scheduled. The run goes on until
// its ticks are done, ctx ends, or Stop.
func (s *Session) Start(ctx context.Context, cfg Config) (*Run, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errors.New("lab: session closed")
	}
	strat, _ := LookupStrategy(cfg.Strategy)
	if err := s.Availability(ctx, cfg.Strategy); err != nil {
		return nil, &UnavailableError{Strategy: cfg.Strategy, Err: err}
	}
	for _, ch := range cfg.Chaos {
		if err := s.admitChaos(ch); err != nil {
			return nil, err
		}
	}
	db, storeURL, err := s.openStore(ctx)
	if err != nil {
		return nil, err
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	r := &Run{
		ID:       time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(id[:]),
		cfg:      cfg,
		strat:    strat,
		s:        s,
		db:       db,
		store:    storeURL,
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		jobs:     cfg.jobs(),
		sections: map[string]*sectionRecord{},
		executed: map[jobTick]int{},
		entered:  map[jobTick]int{},
		missed:   map[jobTick]bool{},
	}
	for _, ch := range cfg.Chaos {
		if err := s.hold(r, ch); err != nil {
			s.release(r)
			return nil, err
		}
	}
	if err := r.putCatalog(ctx); err != nil {
		s.release(r)
		return nil, err
	}
	if cfg.Standby > 0 {
		standby, err := s.startStandby(ctx)
		if err == nil {
			// The run table, which a standby cannot create.
			_, err = schedule.NewStore(ctx, db, &schedule.StoreConfig{Namespace: namespace(r.ID)})
		}
		if err == nil {
			// The catalog's rows and the ledgers reach the standby before
			// its nodes read them.
			err = standby.WaitReplayed(ctx, s.pg)
		}
		if err != nil {
			s.release(r)
			return nil, err
		}
		r.standbyURL = standby.URL()
	}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		r.cancel()
		s.release(r)
		return nil, errors.New("lab: session closed")
	}
	s.runs[r] = struct{}{}
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.runs, r)
		s.mu.Unlock()
	}
	if err := r.startNodes(ctx); err != nil {
		forget()
		r.cancel()
		r.stopNodes()
		r.closeProxies()
		s.release(r)
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
func (r *Run) Config() Config { return r.cfg }

// StartTime returns when the run's first tick fired.
func (r *Run) StartTime() time.Time { return r.start }

// Done is closed when the run has ended and its report is ready.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait waits for the run to end and returns its report.
func (r *Run) Wait(ctx context.Context) (*Report, error) {
	select {
	case <-r.done:
		return r.report, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stop aborts the run: the nodes are told to stop, paused ones resumed,
// faults ended. The report covers what happened until then.
func (r *Run) Stop() { r.cancel() }

// Events returns a copy of the events so far.
func (r *Run) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Subscribe returns a channel that receives every event from the from-th
// (0: all of them, replayed) on, in order and without loss, and is closed
// when the run ends (after its last event) or cancel is called. A slow
// reader slows only itself.
func (r *Run) Subscribe(from int) (<-chan Event, func()) {
	out := make(chan Event, 64)
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
				rest := len(r.events) - i
				r.mu.Unlock()
				if rest == 0 {
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
func (r *Run) addLocked(e Event) {
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

func (r *Run) labEvent(e Event) {
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

// waitEvent waits for the next event that matches, until ctx ends.
func (r *Run) waitEvent(ctx context.Context, match func(Event) bool) (Event, error) {
	w := &waiter{match: match, ch: make(chan Event, 1)}
	r.mu.Lock()
	r.waiters = append(r.waiters, w)
	r.mu.Unlock()
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
		return Event{}, ctx.Err()
	}
}

// startNodes creates each node's proxies and process, waits until every
// node is ready, and sends the start time.
func (r *Run) startNodes(ctx context.Context) error {
	env := nodeBaseEnv(r.s.opts.NodeEnv)
	skews := map[int]time.Duration{}
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == Skew {
			skews[ch.Node()] = ch.Offset
		}
	}
	for n := 1; n <= r.cfg.Nodes; n++ {
		np := &nodeProc{n: n, holding: -1, proxies: map[servers.Kind][]*tcpproxy.Proxy{}}
		np.cfg = NodeConfig{
			Run: r.ID, Node: n, Strategy: r.cfg.Strategy, Fence: r.cfg.Fence,
			Tick: r.cfg.Tick, TTL: r.cfg.TTL, Ticks: r.cfg.Ticks(), Window: r.cfg.Window(),
			Skew: skews[n], Store: r.store, Incarnation: 1,
		}
		r.mu.Lock()
		r.nodes = append(r.nodes, np)
		r.mu.Unlock()
		nodeEnv, err := r.proxy(np)
		if err != nil {
			return err
		}
		np.env = append(slices.Clone(env), nodeEnv...)
		if err := r.spawn(np); err != nil {
			return err
		}
	}
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, np := range r.nodes {
		if err := r.waitReady(wait, np); err != nil {
			return err
		}
	}
	// The first tick fires a moment from now, on the tick grid: every
	// job's fire times (multiples of its cadence since the epoch) are
	// ticks of the run.
	r.mu.Lock()
	first := time.Now().Add(200 * time.Millisecond)
	if r.effective.After(first) {
		first = r.effective // a catalog row fires from its effective time
	}
	r.start = first.Truncate(r.cfg.Tick).Add(r.cfg.Tick)
	r.mu.Unlock()
	for _, np := range r.nodes {
		r.sendStart(np)
	}
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == Latency {
			r.setLatency(ch)
		}
	}
	return nil
}

// nodeBaseEnv is our environment without the AEGIS_* server variables,
// plus extra.
func nodeBaseEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AEGIS_") && !strings.HasPrefix(kv, "AEGIS_LAB_DEBUG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// proxy creates the node's proxies, one per server address it uses, and
// returns the AEGIS_* variables (and store) that point the node at them.
func (r *Run) proxy(np *nodeProc) ([]string, error) {
	var env []string
	add := func(k servers.Kind, upstream string) (string, error) {
		p, err := tcpproxy.New(upstream)
		if err != nil {
			return "", fmt.Errorf("lab: %w", err)
		}
		r.mu.Lock()
		np.proxies[k] = append(np.proxies[k], p)
		r.mu.Unlock()
		return p.Addr(), nil
	}
	if !strings.HasPrefix(r.store, "sqlite:") {
		store := r.store
		if r.onStandby(np.n) {
			store = r.standbyURL
		}
		u, err := url.Parse(store)
		if err != nil || u.Host == "" {
			return nil, errors.New("lab: the PostgreSQL URL must be a postgres:// URL")
		}
		addr, err := add(servers.KindPostgres, u.Host)
		if err != nil {
			return nil, err
		}
		u.Host = addr
		np.cfg.Store = u.String()
		env = append(env, servers.EnvPostgresURL+"="+u.String())
	}
	for _, k := range r.strat.Needs {
		var addrs []string
		switch k {
		case servers.KindRedis, servers.KindZooKeeper:
			for _, a := range r.s.serverAddrs(k) {
				pa, err := add(k, a)
				if err != nil {
					return nil, err
				}
				addrs = append(addrs, pa)
			}
		case servers.KindEtcd:
			for _, a := range r.s.serverAddrs(k) {
				u, err := url.Parse(a)
				if err != nil || u.Host == "" {
					return nil, fmt.Errorf("lab: etcd endpoint %q: want http://host:port", a)
				}
				pa, err := add(k, u.Host)
				if err != nil {
					return nil, err
				}
				u.Host = pa
				addrs = append(addrs, u.String())
			}
		default:
			continue
		}
		name := map[servers.Kind]string{servers.KindRedis: servers.EnvRedisAddrs, servers.KindEtcd: servers.EnvEtcdEndpoints, servers.KindZooKeeper: servers.EnvZKServers}[k]
		env = append(env, name+"="+strings.Join(addrs, ","))
	}
	if r.strat.Name == "sqlite" {
		env = append(env, "AEGIS_SQLITE_PATH="+filepath.Join(r.s.dir, r.ID+"-lease.db"))
	}
	return env, nil
}

// spawn starts np's process (a new incarnation after a kill).
func (r *Run) spawn(np *nodeProc) error {
	r.mu.Lock()
	cfg := np.cfg
	r.mu.Unlock()
	cmd := exec.Command(r.s.opts.Executable, append([]string{"node"}, cfg.args()...)...)
	cmd.Env = np.env
	// Its own process group: a Ctrl-C reaches the lab, which stops the
	// nodes in order; SIGKILL when the lab dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(r.s.dir, fmt.Sprintf("%s-node%d.log", r.ID, np.n)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return fmt.Errorf("lab: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return fmt.Errorf("lab: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("lab: start node%d: %w", np.n, err)
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	np.cmd, np.stdin, np.ready, np.exited = cmd, stdin, ready, exited
	np.finished, np.killed, np.paused, np.critical, np.holding = false, false, false, "", -1
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventStarted, Node: np.n, Detail: fmt.Sprintf("pid %d, incarnation %d", cmd.Process.Pid, cfg.Incarnation)})
	r.bg.Go(func() {
		defer logf.Close()
		defer close(exited)
		lines := bufio.NewScanner(stdout)
		lines.Buffer(make([]byte, 64<<10), 1<<20)
		for lines.Scan() {
			var ev nodeEvent
			if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
				fmt.Fprintf(logf, "lab: bad event line %q\n", lines.Text())
				continue
			}
			r.onNodeEvent(np, ev, ready)
		}
		err := cmd.Wait()
		r.mu.Lock()
		killed, finished, lastErr := np.killed, np.finished, np.lastErr
		np.critical, np.holding = "", -1
		r.mu.Unlock()
		how := "exited"
		if err != nil {
			how = err.Error()
		}
		r.labEvent(Event{Kind: EventExited, Node: np.n, Detail: how})
		if !killed && !finished && r.ctx.Err() == nil {
			if lastErr != "" {
				how += " after: " + lastErr
			}
			r.note("node%d %s, before it finished (log %s)", np.n, how, logf.Name())
		}
	})
	return nil
}

func (r *Run) waitReady(ctx context.Context, np *nodeProc) error {
	r.mu.Lock()
	ready, exited := np.ready, np.exited
	r.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("lab: node%d exited before it was ready; its log: %s", np.n, r.nodeLogTail(np))
	case <-ctx.Done():
		return fmt.Errorf("lab: node%d not ready: %w; its log: %s", np.n, ctx.Err(), r.nodeLogTail(np))
	}
}

func (r *Run) nodeLogTail(np *nodeProc) string {
	path := filepath.Join(r.s.dir, fmt.Sprintf("%s-node%d.log", r.ID, np.n))
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return path + ": " + strings.Join(lines, " | ")
}

func (r *Run) sendStart(np *nodeProc) {
	r.mu.Lock()
	stdin, start := np.stdin, r.start
	r.mu.Unlock()
	b, _ := json.Marshal(startLine{Start: start.UnixNano()})
	_, _ = stdin.Write(append(b, '\n'))
}

// supervise runs the run: tick events, faults, the end, the report.
func (r *Run) supervise() {
	defer close(r.done)
	var ticks sync.WaitGroup
	defer ticks.Wait()
	ticks.Go(r.tickEvents)
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == Skew || ch.Kind == Latency {
			r.labEvent(Event{Kind: EventChaos, Node: ch.Node(), Detail: ch.String()})
			continue
		}
		r.chaos.Go(func() {
			if !sleep(r.ctx, time.Until(r.start.Add(ch.At))) {
				return
			}
			if err := r.apply(r.ctx, ch); err != nil {
				r.note("%s: %v", ch, err)
			}
		})
	}
	lastWindow := r.start.Add(time.Duration(r.cfg.Ticks()-1)*r.cfg.Tick + r.cfg.Window())
	var longest time.Duration
	for _, ch := range r.cfg.Chaos {
		longest = max(longest, ch.At+ch.For)
	}
	hard := time.NewTimer(time.Until(lastWindow.Add(longest + 30*time.Second)))
	defer hard.Stop()
	for {
		if r.allFinished() {
			break
		}
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
			continue
		case <-r.ctx.Done():
			r.mu.Lock()
			r.stopped = true
			r.mu.Unlock()
		case <-hard.C:
			r.note("the run did not end by itself in time: its nodes were stopped")
		}
		break
	}
	r.cancel()
	r.chaos.Wait()
	r.stopNodes()
	r.closeProxies()
	r.healRedis()
	r.s.release(r)
	r.report, r.err = r.buildReport()
}

// allFinished reports whether every node's current process has finished
// its ticks and exited.
func (r *Run) allFinished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, np := range r.nodes {
		select {
		case <-np.exited:
			if np.killed {
				return false // being restarted
			}
		default:
			return false
		}
	}
	return true
}

// tickEvents emits a tick event at each tick of the run's grid, and a
// missed event when a job's tick window ends without an execution (which
// jobs fire at a tick is known then: the edits before it have been made).
func (r *Run) tickEvents() {
	type mark struct {
		at     time.Time
		tick   int
		window bool // the tick's window ends
	}
	var marks []mark
	for t := 1; t <= r.cfg.Ticks(); t++ {
		marks = append(marks, mark{r.tickTime(t), t, false}, mark{r.tickTime(t).Add(r.cfg.Window()), t, true})
	}
	slices.SortStableFunc(marks, func(a, b mark) int { return a.at.Compare(b.at) })
	for _, m := range marks {
		if !sleep(r.ctx, time.Until(m.at)) {
			return
		}
		r.mu.Lock()
		if !m.window {
			r.fired = m.tick
			r.mu.Unlock()
			r.labEvent(Event{Kind: EventTick, Tick: m.tick})
			continue
		}
		for _, j := range r.jobs {
			if j.firesAt(r.tickTime(m.tick), r.edits) {
				r.missLocked(jobTick{j.Name, m.tick})
			}
		}
		r.mu.Unlock()
	}
}

// missLocked records a job's tick as missed unless it was executed or
// already recorded. Caller holds mu.
func (r *Run) missLocked(jt jobTick) {
	if r.executed[jt] == 0 && !r.missed[jt] {
		r.missed[jt] = true
		r.addLocked(Event{T: r.secs(time.Now().UnixNano()), Kind: EventMissed, Job: jt.Job, Tick: jt.Tick})
	}
}

// tickTime is when tick t of the run's grid fires (t from 1).
func (r *Run) tickTime(t int) time.Time { return r.start.Add(time.Duration(t-1) * r.cfg.Tick) }

// putCatalog creates the run's catalog (its namespace, one row per job)
// and the jobs' ledger rows, before any node starts.
func (r *Run) putCatalog(ctx context.Context) error {
	cat, err := schedule.NewCatalog(ctx, r.db, &schedule.CatalogConfig{Namespace: namespace(r.ID), EditDelay: editDelay})
	if err != nil {
		return fmt.Errorf("lab: the run's catalog: %w", err)
	}
	r.catalog = cat
	for _, j := range r.jobs {
		e, err := cat.Put(ctx, j.entry(r.cfg))
		if err != nil {
			return fmt.Errorf("lab: the run's catalog: %s: %w", j.Name, err)
		}
		if e.EffectiveAt.After(r.effective) {
			r.effective = e.EffectiveAt
		}
		if _, err := r.db.ExecContext(ctx, insertLedgerSQL, r.ID, j.Name); err != nil {
			return fmt.Errorf("lab: the ledger of %s: %w", j.Name, err)
		}
	}
	return nil
}

// editDelay is how long after it commits a catalog edit of a run takes
// effect: long enough for every node's binder to see it first.
const editDelay = time.Second

// holderJobLocked is the job of the first node inside a critical section.
func (r *Run) holderJobLocked() string {
	for _, np := range r.nodes {
		if np.critical != "" || np.holding >= 0 {
			return np.job
		}
	}
	return ""
}

// stopNodes ends every node process: stdin closed (the node stops), paused
// ones resumed, and SIGKILL for those still running after a bound.
func (r *Run) stopNodes() {
	r.mu.Lock()
	nodes := slices.Clone(r.nodes)
	r.mu.Unlock()
	for _, np := range nodes {
		r.mu.Lock()
		cmd, stdin, exited := np.cmd, np.stdin, np.exited
		np.paused = false
		r.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = stdin.Close()
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		select {
		case <-exited:
		case <-time.After(r.cfg.Work + 10*time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	r.bgWaitReaders()
}

// bgWaitReaders waits for the readers of every node's output.
func (r *Run) bgWaitReaders() {
	r.mu.Lock()
	nodes := slices.Clone(r.nodes)
	r.mu.Unlock()
	for _, np := range nodes {
		if np.exited != nil {
			<-np.exited
		}
	}
}

func (r *Run) closeProxies() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, np := range r.nodes {
		for _, ps := range np.proxies {
			for _, p := range ps {
				_ = p.Close()
			}
		}
	}
}

// onStandby reports whether node n is in the second region: the last
// Config.Standby nodes, whose store is the hot standby.
func (r *Run) onStandby(n int) bool { return n > r.cfg.Nodes-r.cfg.Standby }
