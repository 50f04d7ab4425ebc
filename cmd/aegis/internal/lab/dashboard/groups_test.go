package dashboard_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// A preset runs as the engine defines it (seat-assignment: three runs side
// by side, the same pause of the holder), and the groups stream follows
// it to its reports. The assertions are the guarantees: the fence and the
// unique row never apply a tick twice.
func TestPresetSeatAssignment(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "a preset of three runs at once")
	h := newHarness(t, nil)
	g := h.start(dashboard.GroupRequest{Scenario: "seat-assignment"})
	require.Equal(t, "seat-assignment", g.Scenario)
	require.Len(t, g.Runs, 3)
	for _, r := range g.Runs {
		require.Equal(t, "running", r.State, "all three start at once: %+v", r)
		require.Equal(t, []string{"pause:holder@2s+3s"}, r.Config.Chaos)
	}
	done := h.waitGroup(g.ID, 80*time.Second)
	require.False(t, done.Stopped)
	seen := map[string]bool{}
	for _, r := range done.Runs {
		require.Equal(t, "done", r.State, "%+v", r)
		require.NotNil(t, r.Report)
		require.Equal(t, "invoice-export", r.Report.Jobs[0].Name)
		require.Equal(t, 8, r.Report.Jobs[0].Ticks, "8 s of the every-second job")
		sum := 0
		for _, j := range r.Report.Jobs {
			sum += j.Ticks
		}
		require.Equal(t, sum, r.Report.Ticks, "the report's ticks are its jobs'")
		require.Contains(t, []string{lab.CheckOK, lab.CheckViolation, lab.CheckUnknown}, r.Report.Checker)
		key := r.Config.Strategy
		if r.Config.Fenced {
			key += " fenced"
		}
		seen[key] = true
		// Each strategy keeps its label (redis fenced keeps the ledger but
		// may run a tick twice; pg-unique fenced retries a run whose end
		// was lost): a harm its label excludes is unsafe.
		require.True(t, r.Report.StoreAgrees, "%s: the report agrees with the store: %v", key, r.Report.Notes)
		require.Empty(t, r.Report.Unsafe, "%s keeps its label; notes: %v", key, r.Report.Notes)
		if r.Report.Checker == lab.CheckViolation {
			require.Equal(t, "/api/runs/"+r.ID+"/visualisation", r.Report.Visualisation)
		}
	}
	require.Equal(t, map[string]bool{"redis": true, "redis fenced": true, "pg-unique fenced": true}, seen)
}

// Stopping a preset stops its runs going and starts no more: the aegis
// preset (19 runs, 3 at a time) stopped after its first wave leaves 16
// not run.
func TestStopGroup(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "the aegis preset's first wave, three runs")
	h := newHarness(t, nil)
	g := h.start(dashboard.GroupRequest{Scenario: "aegis"})
	sc, ok := lab.LookupScenario("aegis")
	require.True(t, ok)
	require.Len(t, g.Runs, len(sc.Runs))
	started := 0
	for _, r := range g.Runs {
		if r.State == "running" || r.State == "unavailable" {
			started++
		}
	}
	require.Equal(t, 3, started, "the first wave: %+v", g.Runs)
	code, b := h.do(http.MethodPost, "/api/groups/"+g.ID+"/stop", map[string]any{})
	require.Equal(t, http.StatusOK, code, "%s", b)
	done := h.waitGroup(g.ID, 60*time.Second)
	require.True(t, done.Stopped)
	notRun := 0
	for _, r := range done.Runs {
		switch r.State {
		case "not-run":
			notRun++
		case "done":
			require.Less(t, r.Report.Jobs[0].Ticks, 8, "stopped early: %+v", r.Report)
		}
	}
	require.Equal(t, len(done.Runs)-3, notRun, "only the first wave ran")
}

// MaxActive bounds the runs going at once.
func TestMaxActive(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "two runs at once")
	h := newHarness(t, &dashboard.Config{MaxActive: 2})
	code, b := h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none"}, {Strategy: "none"}, {Strategy: "none"}}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, string(b), "at most 2 at once")
	id := h.startRun(short("none", false, 100))
	code, b = h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none"}, {Strategy: "none"}}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	code, b = h.do(http.MethodPost, "/api/runs/"+id+"/stop", map[string]any{})
	require.Equal(t, http.StatusOK, code, "%s", b)
	var rs runStream
	drain(t, h.stream("/api/runs/"+id+"/events"), &rs, 30*time.Second)
	var g groupView
	h.getJSON("/api/groups/g1", &g)
	h.waitGroup(g.ID, 10*time.Second)
	h.start(dashboard.GroupRequest{Runs: []dashboard.RunRequest{short("none", false, 1), short("none", false, 1)}})
}

// A preset holds as many runs as it runs at once, not all of its runs:
// beside the aegis preset (22 runs, 3 at a time) under MaxActive 4, one
// more run starts, a second does not.
func TestMaxActiveCountsAPresetByItsParallel(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "a preset's wave and a run")
	h := newHarness(t, &dashboard.Config{MaxActive: 4})
	aegis := h.start(dashboard.GroupRequest{Scenario: "aegis"})
	one := h.start(dashboard.GroupRequest{Runs: []dashboard.RunRequest{short("none", false, 100)}})
	code, b := h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{short("none", false, 1)}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, errorOf(t, b), "4 runs are going or starting and this would add 1: at most 4 at once")
	for _, id := range []string{aegis.ID, one.ID} {
		code, b = h.do(http.MethodPost, "/api/groups/"+id+"/stop", map[string]any{})
		require.Equal(t, http.StatusOK, code, "%s", b)
		h.waitGroup(id, 60*time.Second)
	}
}

// A preset whose runs fault a server one after the other (redlock-majority:
// two runs, one at a time, each restarting a Redlock majority) is admitted:
// its runs never go side by side. The session starts its own Redis.
func TestPresetWithAServerFaultPerRun(t *testing.T) {
	t.Parallel()
	h := newHarnessOn(t, runner.Servers{PostgresURL: testenv.PostgresURL(t)}, nil)
	g := h.start(dashboard.GroupRequest{Scenario: "redlock-majority"})
	require.Len(t, g.Runs, 2)
	code, b := h.do(http.MethodPost, "/api/groups/"+g.ID+"/stop", map[string]any{})
	require.Equal(t, http.StatusOK, code, "%s", b)
	h.waitGroup(g.ID, 60*time.Second)
}

// Close stops the runs going, ends the streams and starts nothing more;
// the run's node processes are gone.
func TestCloseStopsRunsAndStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.startRun(short("none", false, 100))
	events := h.stream("/api/runs/" + id + "/events")
	groups := h.stream("/api/stream")
	var rs runStream
	for {
		e, ok := next(t, events, &rs, 30*time.Second)
		require.True(t, ok)
		if e.Kind == lab.EventExecuted {
			break
		}
	}
	var st struct {
		Status runner.Status `json:"status"`
	}
	h.getJSON("/api/runs/"+id, &st)
	require.NoError(t, h.dash.Close())
	select {
	case <-h.dash.Done():
	default:
		t.Fatal("Done is not closed after Close")
	}
	for _, n := range st.Status.Nodes {
		require.False(t, testenv.PidAlive(n.Pid), "node%d (pid %d) still runs after Close", n.Node, n.Pid)
	}
	drain(t, events, &rs, 10*time.Second) // the stream ends
	timeout := time.After(10 * time.Second)
	for open := true; open; { // and so does the groups stream
		select {
		case _, open = <-groups:
		case <-timeout:
			t.Fatal("the groups stream still goes 10s after Close")
		}
	}
	code, b := h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none"}}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal(b, &e))
	require.Contains(t, e.Error, "closing")
}
