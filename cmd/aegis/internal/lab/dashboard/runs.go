package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// The states of a run in the dashboard.
const (
	statePending     = "pending"     // waiting for its turn (a preset runs Parallel at a time)
	stateStarting    = "starting"    // servers and nodes starting
	stateRunning     = "running"     // ticks firing
	stateDone        = "done"        // ended; its report is ready
	stateNotRun      = "not-run"     // its group was stopped before its turn
	stateUnavailable = "unavailable" // its strategy cannot run in this session
	stateFailed      = "failed"      // it could not start, or its report could not be built
)

// maxGroups is how many groups the dashboard remembers; the oldest
// finished ones are forgotten first.
const maxGroups = 50

// group is what one Start press or one preset started: runs side by side.
type group struct {
	id       string
	scenario lab.Scenario
	parallel int // runs going at once
	created  time.Time
	stop     chan struct{} // closed by a stop of the group
	stopped  bool
	done     bool
	entries  []*runEntry
	first    chan struct{} // closed when the first wave has started (or failed)
}

// runEntry is one run of a group. Guarded by Server.mu.
type runEntry struct {
	g           *group
	index       int
	cfg         lab.Config
	state       string
	run         *runner.Run
	err         string
	unavailable string
	report      *lab.Report
}

// notifyLocked wakes the streams. Caller holds s.mu.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) handleStartGroup(w http.ResponseWriter, r *http.Request) {
	var q GroupRequest
	if err := decode(r.Body, &q); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	sc, err := q.configs()
	if err != nil {
		writeError(w, http.StatusBadRequest, pageError(err))
		return
	}
	g, err := s.startGroup(sc)
	if err != nil {
		writeError(w, http.StatusConflict, pageError(err))
		return
	}
	// Answer once the first wave has started, so that the answer has the
	// runs' ids (or why they did not start).
	select {
	case <-g.first:
	case <-r.Context().Done():
		return
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	v := s.viewGroupLocked(g)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, v)
}

// startGroup registers the group and starts its runs, Parallel at a time.
func (s *Server) startGroup(sc lab.Scenario) (*group, error) {
	parallel := min(max(sc.Parallel, 1), len(sc.Runs))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the dashboard is closing")
	}
	// What the groups going hold: each its runs going or starting, and
	// the runs it will start as those end (a preset runs Parallel at a
	// time), at most Parallel.
	active := 0
	for _, g := range s.groups {
		if g.done {
			continue
		}
		going, left := 0, 0
		for _, e := range g.entries {
			switch e.state {
			case stateStarting, stateRunning:
				going++
			case statePending:
				left++
			}
		}
		active += min(going+left, max(g.parallel, going))
	}
	if active+parallel > s.maxActive {
		return nil, fmt.Errorf("%d runs are going or starting and this would add %d: at most %d at once; stop some first", active, parallel, s.maxActive)
	}
	// The session admits faults (one owner, as for the command line): a
	// fault that kills a server must have it to itself among the runs
	// that go at once, which for a preset run Parallel at a time are any
	// Parallel in a row.
	for i := 0; i+parallel <= len(sc.Runs); i++ {
		if err := s.session.Admit(sc.Runs[i : i+parallel]); err != nil {
			return nil, err
		}
	}
	s.seq++
	g := &group{id: "g" + strconv.Itoa(s.seq), scenario: sc, parallel: parallel, created: time.Now(), stop: make(chan struct{}), first: make(chan struct{})}
	for i, c := range sc.Runs {
		c.OutDir = s.outDir
		g.entries = append(g.entries, &runEntry{g: g, index: i, cfg: c, state: statePending})
	}
	s.groups = append(s.groups, g)
	s.forgetLocked()
	s.notifyLocked()
	s.wg.Go(func() { s.runGroup(g, parallel) })
	return g, nil
}

// forgetLocked drops the oldest finished groups past maxGroups.
func (s *Server) forgetLocked() {
	for len(s.groups) > maxGroups {
		i := 0
		for i < len(s.groups) && !s.groups[i].done {
			i++
		}
		if i == len(s.groups) {
			return
		}
		for _, e := range s.groups[i].entries {
			if e.run != nil {
				delete(s.runs, e.run.ID)
			}
		}
		s.groups = append(s.groups[:i], s.groups[i+1:]...)
	}
}

// runGroup runs the group's runs, parallel at a time, until they are done
// or the group is stopped.
func (s *Server) runGroup(g *group, parallel int) {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var firstWave sync.WaitGroup
	firstWave.Add(parallel)
	s.wg.Go(func() { firstWave.Wait(); close(g.first) }) // every run of the first wave calls Done, started or not
	for i, e := range g.entries {
		select {
		case sem <- struct{}{}:
		case <-g.stop:
		case <-s.ctx.Done():
		}
		if s.stopping(g) {
			s.mu.Lock()
			for _, rest := range g.entries[i:] {
				rest.state = stateNotRun
			}
			s.notifyLocked()
			s.mu.Unlock()
			for range max(parallel-i, 0) {
				firstWave.Done()
			}
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.runOne(e, func() {
				if i < parallel {
					firstWave.Done()
				}
			})
		})
	}
	wg.Wait()
	s.mu.Lock()
	g.done = true
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Server) stopping(g *group) bool {
	select {
	case <-g.stop:
		return true
	case <-s.ctx.Done():
		return true
	default:
		return false
	}
}

// runOne starts one run, calls started once it runs (or could not start),
// and waits for its report.
func (s *Server) runOne(e *runEntry, started func()) {
	s.mu.Lock()
	e.state = stateStarting
	cfg := e.cfg
	s.notifyLocked()
	s.mu.Unlock()
	r, err := s.session.Start(s.ctx, cfg)
	var ue *runner.UnavailableError
	s.mu.Lock()
	switch {
	case errors.As(err, &ue):
		e.state, e.unavailable = stateUnavailable, ue.Err.Error()
	case err != nil:
		e.state, e.err = stateFailed, pageError(err)
	default:
		e.state, e.run = stateRunning, r
		s.runs[r.ID] = e
		if s.stopping(e.g) {
			r.Stop() // stopped while it started
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
	started()
	if err != nil {
		fmt.Fprintf(s.log, "aegis lab: %s did not start: %v\n", cfg, err)
		return
	}
	fmt.Fprintf(s.log, "aegis lab: run %s started: %s\n", r.ID, cfg)
	rep, err := r.Wait(context.Background()) // the run ends by itself, by Stop, or with s.ctx
	s.mu.Lock()
	e.state, e.report = stateDone, rep
	if err != nil {
		e.state, e.err = stateFailed, err.Error()
	}
	s.notifyLocked()
	s.mu.Unlock()
	if rep != nil {
		fmt.Fprintf(s.log, "aegis lab: run %s ended: checker %s, %d duplicates applied, %d stale writes refused\n", r.ID, rep.Checker, rep.DuplicatesApplied, rep.StaleRejected)
	}
}

// runView is a run for the page.
type runView struct {
	Index       int         `json:"index"`
	ID          string      `json:"id,omitempty"`
	Group       string      `json:"group"`
	State       string      `json:"state"`
	Config      configView  `json:"config"`
	Error       string      `json:"error,omitempty"`
	Unavailable string      `json:"unavailable,omitempty"`
	Report      *reportView `json:"report,omitempty"`
}

// groupView is a group for the page.
type groupView struct {
	ID       string    `json:"id"`
	Scenario string    `json:"scenario,omitempty"`
	Seed     string    `json:"seed,omitempty"`
	Watch    string    `json:"watch,omitempty"`
	Parallel int       `json:"parallel"`
	Created  time.Time `json:"created"`
	Done     bool      `json:"done"`
	Stopped  bool      `json:"stopped"`
	Runs     []runView `json:"runs"`
}

func (s *Server) viewRunLocked(e *runEntry) runView {
	v := runView{Index: e.index, Group: e.g.id, State: e.state, Config: viewConfig(e.cfg), Error: e.err, Unavailable: e.unavailable}
	if e.run != nil {
		v.ID = e.run.ID
		v.Report = viewReport(e.run.ID, e.report)
	}
	return v
}

func (s *Server) viewGroupLocked(g *group) groupView {
	v := groupView{ID: g.id, Scenario: g.scenario.Name, Seed: g.scenario.Seed, Watch: g.scenario.Watch, Parallel: max(g.scenario.Parallel, 1),
		Created: g.created, Done: g.done, Stopped: g.stopped, Runs: []runView{}}
	for _, e := range g.entries {
		v.Runs = append(v.Runs, s.viewRunLocked(e))
	}
	return v
}

func (s *Server) viewGroupsLocked() []groupView {
	out := []groupView{}
	for _, g := range s.groups {
		out = append(out, s.viewGroupLocked(g))
	}
	return out
}

func (s *Server) handleGroups(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	v := s.viewGroupsLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) lookupGroupLocked(id string) *group {
	for _, g := range s.groups {
		if g.id == id {
			return g
		}
	}
	return nil
}

func (s *Server) handleGroup(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupGroupLocked(r.PathValue("id"))
	if g == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no group %q", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, s.viewGroupLocked(g))
}

// handleStopGroup stops the group's runs that are going and starts no
// more of them; their reports cover what ran.
func (s *Server) handleStopGroup(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	g := s.lookupGroupLocked(r.PathValue("id"))
	if g == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, fmt.Sprintf("no group %q", r.PathValue("id")))
		return
	}
	if !g.stopped {
		g.stopped = true
		close(g.stop)
	}
	for _, e := range g.entries {
		if e.run != nil {
			e.run.Stop()
		}
	}
	s.notifyLocked()
	v := s.viewGroupLocked(g)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

// lookupRun returns the run entry named in the path, or writes a 404.
func (s *Server) lookupRun(w http.ResponseWriter, r *http.Request) (*runEntry, *runner.Run) {
	id := r.PathValue("id")
	s.mu.Lock()
	e := s.runs[id]
	s.mu.Unlock()
	if e == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no run %q", id))
		return nil, nil
	}
	return e, e.run
}

// runStatus is a run with its state now.
type runStatus struct {
	runView
	Status runner.Status `json:"status"`
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	e, run := s.lookupRun(w, r)
	if e == nil {
		return
	}
	st := run.Status()
	s.mu.Lock()
	v := runStatus{runView: s.viewRunLocked(e), Status: st}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) handleStopRun(w http.ResponseWriter, r *http.Request) {
	e, run := s.lookupRun(w, r)
	if e == nil {
		return
	}
	run.Stop()
	s.mu.Lock()
	v := s.viewRunLocked(e)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

// handleReport serves the run's JSON report, the contract of `aegis lab
// run --json`, once the run has ended.
func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	e, run := s.lookupRun(w, r)
	if e == nil {
		return
	}
	select {
	case <-run.Done():
	default:
		writeError(w, http.StatusConflict, "the run is still going: its report is ready when it ends")
		return
	}
	rep, err := run.Wait(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf(`inline; filename="aegis-lab-%s.json"`, run.ID))
	writeJSON(w, http.StatusOK, rep)
}

// handleVisualisation serves the checker's visualisation of a violation
// (porcupine's HTML, self-contained).
func (s *Server) handleVisualisation(w http.ResponseWriter, r *http.Request) {
	e, run := s.lookupRun(w, r)
	if e == nil {
		return
	}
	// The run's own report, as handleReport serves it: the entry's copy is
	// set a moment after the run's event stream has ended with it.
	path := ""
	select {
	case <-run.Done():
		if rep, err := run.Wait(r.Context()); err == nil && rep != nil {
			path = rep.Visualisation
		}
	default:
	}
	if path == "" {
		writeError(w, http.StatusNotFound, "this run has no visualisation: the checker writes one on a violation, when the run ends")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	http.ServeFile(w, r, path)
}

// injectTimeout bounds how long a chaos request waits for its fault to
// begin (a holder target waits for a node to enter the critical section).
const injectTimeout = 30 * time.Second

func (s *Server) handleChaos(w http.ResponseWriter, r *http.Request) {
	e, run := s.lookupRun(w, r)
	if e == nil {
		return
	}
	var q ChaosRequest
	if err := decode(r.Body, &q); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ch, err := lab.ParseChaos(q.Spec)
	if err != nil {
		writeError(w, http.StatusBadRequest, pageError(err))
		return
	}
	// The run's own rules (a node that exists, failover for redis only…);
	// At is ignored: the fault begins now.
	c := run.Config()
	c.Chaos = []lab.Chaos{ch}
	c.Duration = max(c.Duration, ch.At)
	if err := c.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, pageError(err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), injectTimeout)
	defer cancel()
	if err := run.Inject(ctx, ch); err != nil {
		writeError(w, http.StatusConflict, pageError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"injected": ch.String()})
}
