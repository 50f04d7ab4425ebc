package dashboard

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/schedule"
)

//go:embed assets
var assets embed.FS

// Config configures a Server. The zero value serves a loopback dashboard.
type Config struct {
	// Token, when set, must be carried by every mutating request in the
	// X-Aegis-Token header, and the dashboard then answers any Host.
	// Without it the dashboard answers loopback Host names only. A
	// dashboard on a non-loopback address needs one (see [Loopback]).
	// Default: none.
	Token string
	// OutDir is where the checker writes the visualisation of a
	// violation, which the dashboard serves. Default: a directory in the
	// session's scratch directory.
	OutDir string
	// MaxActive bounds the runs going at once (each is Nodes processes).
	// Default: 12.
	MaxActive int
	// Log receives a line per run started and ended. Default: none.
	Log io.Writer
}

// Server is the dashboard: an http.Handler over a lab session. Its runs
// end with Close (or with the session's Close); it never closes the
// session. Safe for concurrent use.
type Server struct {
	session   *runner.Session
	token     string
	outDir    string
	maxActive int
	log       io.Writer
	mux       *http.ServeMux

	ctx    context.Context // ends with Close: stops the runs and the streams
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	groups  []*group
	runs    map[string]*runEntry // by run id
	seq     int
	changed chan struct{} // closed and replaced when a group or run changes
	avail   *availability
}

// New returns the dashboard over session.
func New(session *runner.Session, cfg *Config) (*Server, error) {
	if session == nil {
		return nil, fmt.Errorf("%w: dashboard: session is nil", aegis.ErrInvalid)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.OutDir = cmp.Or(c.OutDir, filepath.Join(session.Dir(), "visualisations"))
	c.MaxActive = cmp.Or(c.MaxActive, 12)
	if c.MaxActive < 1 {
		return nil, fmt.Errorf("%w: dashboard: MaxActive %d: want at least 1", aegis.ErrInvalid, c.MaxActive)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if err := os.MkdirAll(c.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	s := &Server{
		session: session, token: c.Token, outDir: c.OutDir, maxActive: c.MaxActive, log: c.Log,
		runs: map[string]*runEntry{}, changed: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// Close stops the runs the dashboard started and ends its event streams,
// then waits for them. It does not close the session.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// Done is closed when Close has begun: long-lived handlers (event streams)
// end then, so that an http.Server's Shutdown does not wait for them.
func (s *Server) Done() <-chan struct{} { return s.ctx.Done() }

// ServeHTTP applies the access rules, then serves the page and the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if code, msg := s.check(r); code != 0 {
		writeError(w, code, msg)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	m := http.NewServeMux()
	m.Handle("GET /{$}", noCache(files))
	m.Handle("GET /assets/", noCache(http.StripPrefix("/assets/", files)))
	m.HandleFunc("GET /api/info", s.handleInfo)
	m.HandleFunc("GET /api/availability", s.handleAvailability)
	m.HandleFunc("GET /api/groups", s.handleGroups)
	m.HandleFunc("POST /api/groups", s.handleStartGroup)
	m.HandleFunc("GET /api/groups/{id}", s.handleGroup)
	m.HandleFunc("POST /api/groups/{id}/stop", s.handleStopGroup)
	m.HandleFunc("GET /api/stream", s.handleStream)
	m.HandleFunc("GET /api/runs/{id}", s.handleRun)
	m.HandleFunc("GET /api/runs/{id}/events", s.handleRunEvents)
	m.HandleFunc("GET /api/runs/{id}/report", s.handleReport)
	m.HandleFunc("GET /api/runs/{id}/visualisation", s.handleVisualisation)
	m.HandleFunc("POST /api/runs/{id}/chaos", s.handleChaos)
	m.HandleFunc("POST /api/runs/{id}/stop", s.handleStopRun)
	s.mux = m
}

// noCache makes the browser revalidate the page and its assets, so that a
// rebuilt aegis is picked up on reload.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody is every error's JSON.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

// strategyView is a strategy for the page's table.
type strategyView struct {
	Name          string `json:"name"`
	Summary       string `json:"summary"`
	NotGuaranteed string `json:"not_guaranteed"`
	Fenceable     bool   `json:"fenceable"`
	Token         string `json:"token"`
	// Holds is what a node's grant is, for the timeline's line under a
	// run: "lease" (it expires unless renewed), "run row" (run keys: the
	// tick's row, reaped when it expires), "queue job" (leader mode),
	// "claim" (optimistic: a version, never released) or "" (none: no
	// exclusion at all).
	Holds string `json:"holds"`
	// Servers are the servers its nodes use ("postgres", "redis", …), for
	// the faults the page offers.
	Servers []string `json:"servers"`
	// Redis is how it uses Redis: "primary", "quorum" or "".
	Redis string `json:"redis,omitempty"`
}

func viewStrategy(st lab.Strategy) strategyView {
	v := strategyView{Name: st.Name, Summary: st.Summary, NotGuaranteed: st.NotGuaranteed, Fenceable: st.Fenceable(), Token: string(st.Token),
		Holds: holds(st), Servers: []string{}, Redis: string(st.Redis)}
	for _, k := range st.Needs {
		v.Servers = append(v.Servers, string(k))
	}
	return v
}

// holds names a strategy's grant for the page.
func holds(st lab.Strategy) string {
	switch {
	case st.Name == "none":
		return ""
	case st.Mode == schedule.ModeRunKey:
		return "run row"
	case st.Mode == schedule.ModeLeader:
		return "queue job"
	case st.Token == lab.VersionToken:
		return "claim"
	}
	return "lease"
}

// scenarioView is a preset for the page.
type scenarioView struct {
	Name     string       `json:"name"`
	Seed     string       `json:"seed"`
	Watch    string       `json:"watch"`
	Parallel int          `json:"parallel"`
	Runs     []configView `json:"runs"`
}

// info is what the page needs to draw its controls.
type info struct {
	TokenRequired bool           `json:"token_required"`
	Defaults      configView     `json:"defaults"`
	MaxNodes      int            `json:"max_nodes"`
	MaxActive     int            `json:"max_active"`
	Strategies    []strategyView `json:"strategies"`
	Scenarios     []scenarioView `json:"scenarios"`
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	in := info{TokenRequired: s.token != "", Defaults: viewConfig(lab.DefaultConfig()), MaxNodes: lab.MaxNodes, MaxActive: s.maxActive}
	for _, st := range lab.Strategies {
		in.Strategies = append(in.Strategies, viewStrategy(st))
	}
	for _, name := range lab.ScenarioNames() {
		sc, _ := lab.LookupScenario(name)
		v := scenarioView{Name: sc.Name, Seed: sc.Seed, Watch: sc.Watch, Parallel: max(sc.Parallel, 1)}
		for _, c := range sc.Runs {
			v.Runs = append(v.Runs, viewConfig(c))
		}
		in.Scenarios = append(in.Scenarios, v)
	}
	writeJSON(w, http.StatusOK, in)
}

// availability is each strategy's availability in the session, found once
// (finding out starts the servers the lab starts itself).
type availability struct {
	done   chan struct{}
	reason map[string]string // "" when available
}

func (s *Server) handleAvailability(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	a := s.avail
	if a == nil && !s.closed {
		a = &availability{done: make(chan struct{}), reason: map[string]string{}}
		s.avail = a
		s.wg.Go(func() {
			defer close(a.done)
			for _, st := range lab.Strategies {
				reason := ""
				if err := s.session.Availability(s.ctx, st.Name); err != nil {
					reason = err.Error()
				}
				s.mu.Lock()
				a.reason[st.Name] = reason
				s.mu.Unlock()
			}
		})
	}
	s.mu.Unlock()
	if a == nil {
		writeError(w, http.StatusServiceUnavailable, "the dashboard is closing")
		return
	}
	select {
	case <-a.done:
	case <-r.Context().Done():
		return
	case <-s.ctx.Done():
		writeError(w, http.StatusServiceUnavailable, "the dashboard is closing")
		return
	}
	s.mu.Lock()
	out := make(map[string]*string, len(a.reason))
	for name, reason := range a.reason {
		if reason != "" {
			out[name] = &reason
		} else {
			out[name] = nil
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// configView is a run's configuration for the page: durations as Go
// strings and as seconds.
type configView struct {
	Strategy  string    `json:"strategy"`
	Fence     bool      `json:"fence"`
	Fenced    bool      `json:"fenced"`
	Fenceable bool      `json:"fenceable"`
	Nodes     int       `json:"nodes"`
	Duration  string    `json:"duration"`
	Tick      string    `json:"tick"`
	Work      string    `json:"work"`
	TTL       string    `json:"ttl"`
	Ticks     int       `json:"ticks"`
	TickS     float64   `json:"tick_s"`
	WindowS   float64   `json:"window_s"`
	Chaos     []string  `json:"chaos"`
	Summary   string    `json:"summary"`
	Jobs      []jobView `json:"jobs"`
	Standby   int       `json:"standby"`
	// Watch is what to watch in the run, from its strategy and faults
	// (a preset says its own).
	Watch string `json:"watch"`
}

// jobView is a schedule of a run's catalog.
type jobView struct {
	Name      string  `json:"name"`
	Every     string  `json:"every"`
	EveryS    float64 `json:"every_s"`
	Work      string  `json:"work"`
	KeepAlive bool    `json:"keep_alive"`
}

func viewConfig(c lab.Config) configView {
	st, _ := lab.LookupStrategy(c.Strategy)
	v := configView{
		Strategy: c.Strategy, Fence: c.Fence, Fenced: c.Fence && st.Fenceable(), Fenceable: st.Fenceable(), Nodes: c.Nodes,
		Duration: c.Duration.String(), Tick: c.Tick.String(), Work: c.Work.String(), TTL: c.TTL.String(),
		Ticks: c.Ticks(), TickS: c.Tick.Seconds(), WindowS: c.Window().Seconds(), Chaos: []string{}, Summary: c.Params(),
	}
	if c.Strategy != "" {
		v.Summary = c.String()
	}
	for _, ch := range c.Chaos {
		v.Chaos = append(v.Chaos, ch.String())
	}
	if c.Strategy != "" {
		for _, j := range c.Jobs() {
			v.Jobs = append(v.Jobs, jobView{Name: j.Name, Every: j.Every.String(), EveryS: j.Every.Seconds(), Work: j.Work.String(), KeepAlive: !j.NoKeepAlive})
		}
		v.Standby = c.Standby
		v.Watch = guidance(c)
	}
	return v
}

// reportView is a finished run's counts and verdict (the JSON report
// without its events).
type reportView struct {
	Ticks             int             `json:"ticks"`
	Executions        int             `json:"executions"`
	DuplicateTicks    int             `json:"duplicate_ticks"`
	DuplicatesApplied int             `json:"duplicates_applied"`
	StaleRejected     int             `json:"stale_rejected"`
	MissedTicks       int             `json:"missed_ticks"`
	LostUpdates       int64           `json:"lost_updates"`
	Refires           int             `json:"refires"`
	RetriedRefires    int             `json:"retried_refires"`
	Balance           int64           `json:"balance"`
	Checker           string          `json:"checker"`
	Verdict           string          `json:"verdict"`                 // ok, harmed or inconclusive
	Inconclusive      []string        `json:"inconclusive"`            // why the run proves nothing
	Visualisation     string          `json:"visualisation,omitempty"` // its URL, on a violation
	Notes             []string        `json:"notes"`
	Harms             []lab.Harm      `json:"harms"`
	Unsafe            []lab.Harm      `json:"unsafe"` // the harms the strategy's label excludes
	StoreAgrees       bool            `json:"store_agrees"`
	Disagreement      string          `json:"disagreement,omitempty"`
	Jobs              []lab.JobReport `json:"jobs"`
}

func viewReport(id string, rep *lab.Report) *reportView {
	if rep == nil {
		return nil
	}
	v := &reportView{
		Ticks: rep.Ticks, Executions: rep.Executions, DuplicateTicks: rep.DuplicateTicks, DuplicatesApplied: rep.DuplicatesApplied,
		StaleRejected: rep.StaleRejected, MissedTicks: rep.MissedTicks, LostUpdates: rep.LostUpdates, Refires: rep.Refires, RetriedRefires: rep.RetriedRefires, Balance: rep.Balance,
		Checker: rep.Checker, Verdict: rep.Verdict, Inconclusive: append([]string{}, rep.Inconclusive...), Notes: append([]string{}, rep.Notes...),
		Harms: append([]lab.Harm{}, rep.Harms...), Unsafe: append([]lab.Harm{}, rep.Unsafe...), StoreAgrees: rep.StoreAgrees, Disagreement: rep.Disagreement, Jobs: append([]lab.JobReport{}, rep.Jobs...),
	}
	for i := range v.Jobs {
		v.Jobs[i].Visualisation = "" // a path on the lab's machine; the run's page is below
	}
	if rep.Visualisation != "" {
		v.Visualisation = "/api/runs/" + id + "/visualisation"
	}
	return v
}
