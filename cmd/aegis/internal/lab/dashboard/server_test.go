package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
)

// The page and its assets come from the binary, and the API describes the
// strategies (with what each does not guarantee) and the presets.
func TestPageAndInfo(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	code, page := h.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(page), "<title>Aegis lab</title>")
	require.NotContains(t, string(page), "http://", "the page loads nothing from the network")
	require.NotContains(t, string(page), "https://")
	for _, asset := range []string{"/assets/app.js", "/assets/style.css"} {
		code, b := h.do(http.MethodGet, asset, nil)
		require.Equal(t, http.StatusOK, code, asset)
		require.NotEmpty(t, b)
		require.NotContains(t, string(b), "https://", "%s loads nothing from the network", asset)
	}

	var info struct {
		TokenRequired bool `json:"token_required"`
		Strategies    []struct {
			Name          string `json:"name"`
			NotGuaranteed string `json:"not_guaranteed"`
			Fenceable     bool   `json:"fenceable"`
		} `json:"strategies"`
		Scenarios []struct {
			Name  string `json:"name"`
			Watch string `json:"watch"`
			Runs  []struct {
				Strategy string `json:"strategy"`
			} `json:"runs"`
		} `json:"scenarios"`
	}
	h.getJSON("/api/info", &info)
	require.False(t, info.TokenRequired)
	require.Len(t, info.Strategies, len(lab.Strategies))
	for i, s := range lab.Strategies {
		require.Equal(t, s.Name, info.Strategies[i].Name)
		require.Equal(t, s.NotGuaranteed, info.Strategies[i].NotGuaranteed)
		require.Equal(t, s.Fenceable(), info.Strategies[i].Fenceable)
	}
	require.Len(t, info.Scenarios, len(lab.Scenarios))
	for i, sc := range lab.Scenarios {
		require.Equal(t, sc.Name, info.Scenarios[i].Name)
		require.Equal(t, sc.Watch, info.Scenarios[i].Watch)
		require.Len(t, info.Scenarios[i].Runs, len(sc.Runs))
	}

	var avail map[string]*string
	h.getJSON("/api/availability", &avail)
	require.Len(t, avail, len(lab.Strategies))
	for _, name := range []string{"none", "sqlite", "pg-lease", "pg-unique", "redis", "etcd", "zookeeper"} {
		require.Contains(t, avail, name)
		require.Nil(t, avail[name], "%s is available on the shared servers: %v", name, avail[name])
	}
}

// none with 3 nodes: the stream shows every tick executed by every node,
// the duplicates as they happen, the status with its counts, then the
// report: every tick applied three times and the checker's violation,
// whose visualisation the dashboard serves.
func TestRunStreamShowsDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.startRun(short("none", false, 4))
	events := h.stream("/api/runs/" + id + "/events")
	var rs runStream
	for {
		e, ok := next(t, events, &rs, 30*time.Second)
		require.True(t, ok, "the stream ended before a duplicate:\n%s", dump(rs.events))
		if e.Kind == lab.EventDuplicate {
			break
		}
	}
	drain(t, events, &rs, 60*time.Second)
	for i, id := range rs.ids {
		require.Equal(t, i, id, "the events come in order, each with its index")
	}
	require.NotNil(t, rs.end, "the stream ends with the report")
	require.Empty(t, rs.end.Error)
	rep := rs.end.Report
	require.NotNil(t, rep)
	require.Equal(t, 4, rep.Ticks)
	// A node whose timer fires past a tick's starting deadline (a loaded
	// machine) reports it misfired instead of running it.
	misfired := 0
	for _, e := range rs.events {
		if e.Kind == lab.EventMisfired && e.Node != 0 && e.Tick > 0 {
			misfired += misfiredCount(e) // "N ticks dropped by policy skip" stands for N
		}
	}
	require.Equal(t, 12-misfired, rep.Executions, "every node runs every tick it does not report misfired:\n%s", dump(rs.events))
	require.Positive(t, rep.DuplicatesApplied)
	require.LessOrEqual(t, rep.DuplicatesApplied, 4)
	// Whether two nodes read the same balance in one tick is a race (the
	// three read at each tick, and write 200 ms later); when two did, both
	// committed (none writes unconditionally) and the checker's verdict is
	// forced, and the dashboard serves its visualisation.
	violation := sameRead(rs.events)
	if violation {
		require.Equal(t, lab.CheckViolation, rep.Checker)
	}
	if rep.Checker == lab.CheckViolation {
		require.Equal(t, "/api/runs/"+id+"/visualisation", rep.Visualisation)
	} else {
		require.Empty(t, rep.Visualisation)
	}

	require.NotEmpty(t, rs.statuses)
	last := rs.statuses[len(rs.statuses)-1]
	require.True(t, last.Done)
	require.Len(t, last.Nodes, 3)
	require.Equal(t, rep.DuplicatesApplied, last.DuplicatesApplied, "the status counts what the events showed")
	require.True(t, slices.ContainsFunc(rs.statuses, func(s runner.Status) bool { return s.Holder != 0 }), "a status named a node inside the critical section")

	if rep.Visualisation != "" {
		code, html := h.do(http.MethodGet, rep.Visualisation, nil)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, strings.ToLower(string(html)), "<html")
	}

	// The JSON report is the contract of aegis lab run --json.
	code, b := h.do(http.MethodGet, "/api/runs/"+id+"/report", nil)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var full map[string]any
	require.NoError(t, json.Unmarshal(b, &full))
	var keys []string
	for k := range full {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Subset(t, keys, []string{"checker", "config", "duplicate_ticks", "duplicates_applied", "duration_s", "events", "executions", "fenced",
		"harms", "inconclusive", "jobs", "lost_updates", "missed_ticks", "nodes", "notes", "run", "scenario", "stale_rejected", "store_agrees", "strategy", "ticks", "unsafe", "verdict"},
		"the report's JSON, as aegis lab run --json prints it")
	require.Len(t, full["events"], len(rs.events), "the stream carried every event of the report")

	// A stream opened later replays, from an index or after the last id
	// a reconnecting EventSource saw.
	var again runStream
	drain(t, h.stream("/api/runs/"+id+"/events?from=5"), &again, 10*time.Second)
	require.Equal(t, 5, again.ids[0])
	require.Equal(t, rs.events[5:], again.events)
	require.NotNil(t, again.end)
	var resumed runStream
	drain(t, h.stream("/api/runs/"+id+"/events", "Last-Event-ID", "7"), &resumed, 10*time.Second)
	require.Equal(t, 8, resumed.ids[0])
}

// pg-lease fenced: the holder paused from the API past its TTL is
// replaced, and its late write is refused by the fence; nothing is applied
// twice, and the status shows the paused node.
func TestChaosPauseHolderFenced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.startRun(short("pg-lease", true, 12))
	events := h.stream("/api/runs/" + id + "/events")
	var rs runStream
	for {
		e, ok := next(t, events, &rs, 30*time.Second)
		require.True(t, ok, "the run ended before a node entered:\n%s", dump(rs.events))
		if e.Kind == lab.EventEntered {
			break
		}
	}
	code, b := h.do(http.MethodPost, "/api/runs/"+id+"/chaos", dashboard.ChaosRequest{Spec: "pause:holder@0s+1500ms"})
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.Contains(t, string(b), `"injected":"pause:holder@0s+1.5s"`)
	var st struct {
		State  string        `json:"state"`
		Status runner.Status `json:"status"`
	}
	h.getJSON("/api/runs/"+id, &st)
	require.Equal(t, "running", st.State)
	paused := slices.IndexFunc(st.Status.Nodes, func(n runner.NodeStatus) bool { return n.State == "paused" })
	require.GreaterOrEqual(t, paused, 0, "a node is paused: %+v", st.Status)

	drain(t, events, &rs, 60*time.Second)
	kinds := map[string]int{}
	for _, e := range rs.events {
		kinds[e.Kind]++
	}
	require.Positive(t, kinds[lab.EventChaos], "the pause is on the timeline")
	require.Positive(t, kinds[lab.EventHealed], "and its end")
	require.Zero(t, kinds[lab.EventDuplicate], "nothing applied twice:\n%s", dump(rs.events))
	require.NotNil(t, rs.end)
	require.Zero(t, rs.end.Report.DuplicatesApplied)
	// Whether another node entered the paused holder's tick before it
	// resumed is a race; once one did, the refusal is forced.
	if attempt, ok := takenOver(rs.events); ok {
		require.True(t, slices.ContainsFunc(rs.events, func(e lab.Event) bool { return e.Kind == lab.EventStale && e.Attempt == attempt }),
			"the resumed holder's write (attempt %s) was refused:\n%s", attempt, dump(rs.events))
		require.GreaterOrEqual(t, rs.end.Report.StaleRejected, 1)
	}
	require.Equal(t, lab.CheckOK, rs.end.Report.Checker)
	require.Empty(t, rs.end.Report.Visualisation)
	code, _ = h.do(http.MethodGet, "/api/runs/"+id+"/visualisation", nil)
	require.Equal(t, http.StatusNotFound, code, "no violation, no visualisation")
}

// Bad requests are refused with a message that says what is wrong, and
// start nothing.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	yes := true
	tests := []struct {
		name string
		body any
		code int
		want string
	}{
		{"not JSON", "{", http.StatusBadRequest, "the request body"},
		{"unknown field", map[string]any{"strategies": []string{"none"}}, http.StatusBadRequest, `unknown field "strategies"`},
		{"nothing", dashboard.GroupRequest{}, http.StatusBadRequest, "nothing to run"},
		{"both", dashboard.GroupRequest{Scenario: "aegis", Runs: []dashboard.RunRequest{{Strategy: "none"}}}, http.StatusBadRequest, "not both"},
		{"unknown scenario", dashboard.GroupRequest{Scenario: "payday"}, http.StatusBadRequest, `scenario "payday": unknown`},
		{"unknown strategy", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "mutex"}}}, http.StatusBadRequest, `strategy "mutex": unknown`},
		{"no strategy", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Nodes: new(2)}}}, http.StatusBadRequest, "strategy is required"},
		{"nodes", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none", Nodes: new(17)}}}, http.StatusBadRequest, "nodes 17: want 1 to 16"},
		{"zero nodes", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none", Nodes: new(0)}}}, http.StatusBadRequest, "nodes 0: want 1 to 16"},
		{"tick", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none", Tick: "soon"}}}, http.StatusBadRequest, `tick "soon" is not a duration`},
		{"ttl", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none", TTL: "-1s"}}}, http.StatusBadRequest, "TTL -1s: must be positive"},
		{"chaos", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none", Chaos: []string{"nap:holder@1s"}}}}, http.StatusBadRequest, `unknown kind "nap"`},
		{"second run", dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none"}, {Strategy: "pg-lease", Fence: &yes, Chaos: []string{"failover:redis@1s"}}}}, http.StatusBadRequest, "run 2 (pg-lease): failover:redis needs a strategy on the Redis primary with a replica"},
		{"too many", dashboard.GroupRequest{Runs: slices.Repeat([]dashboard.RunRequest{{Strategy: "none"}}, 33)}, http.StatusBadRequest, "33 runs: want at most 32"},
	}
	for _, tt := range tests {
		var code int
		var b []byte
		if s, ok := tt.body.(string); ok {
			code, b = h.doRaw(http.MethodPost, "/api/groups", s)
		} else {
			code, b = h.do(http.MethodPost, "/api/groups", tt.body)
		}
		require.Equal(t, tt.code, code, "%s: %s", tt.name, b)
		var e struct{ Error string }
		require.NoError(t, json.Unmarshal(b, &e), "%s: errors are JSON: %s", tt.name, b)
		require.Contains(t, e.Error, tt.want, tt.name)
		pageWords(t, e.Error, tt.body)
	}
	var groups []groupView
	h.getJSON("/api/groups", &groups)
	require.Empty(t, groups, "no bad request started anything")

	code, b := h.do(http.MethodGet, "/api/runs/nope", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, string(b), `no run \"nope\"`)
	code, _ = h.do(http.MethodPost, "/api/runs/nope/chaos", dashboard.ChaosRequest{Spec: "kill:node1@0s"})
	require.Equal(t, http.StatusNotFound, code)
	code, _ = h.do(http.MethodGet, "/api/groups/g99", nil)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = h.do(http.MethodGet, "/api/runs/nope/events?from=x", nil)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = h.do(http.MethodGet, "/api/groups/g1/stop", nil)
	require.Equal(t, http.StatusMethodNotAllowed, code)
	code, b = h.doRaw(http.MethodPost, "/api/groups", `{"runs":[{"strategy":"none"}]}`, "Content-Type", "text/plain")
	require.Equal(t, http.StatusUnsupportedMediaType, code, "%s", b)

	// Faults that do not fit the run are refused; a run that has ended
	// takes none.
	req := short("none", false, 100)
	req.Nodes = new(2)
	id := h.startRun(req)
	for _, tt := range []struct{ spec, want string }{
		{"nap:holder", `unknown kind "nap"`},
		{"pause:holder@0s", `missing +FOR`},
		{"pause:node3@0s+1s", "node3 does not exist: the run has 2 nodes"},
		{"failover:redis@0s", "failover:redis needs a strategy on the Redis primary with a replica"},
		{"restart:redis@0s", "restart:redis needs a Redis strategy"},
	} {
		code, b := h.do(http.MethodPost, "/api/runs/"+id+"/chaos", dashboard.ChaosRequest{Spec: tt.spec})
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", tt.spec, b)
		var e struct{ Error string }
		require.NoError(t, json.Unmarshal(b, &e))
		require.Contains(t, e.Error, tt.want, tt.spec)
		pageWords(t, e.Error, tt.spec)
	}
	// The Catalog form's Add schedule with the course's nightly job, longer
	// than the run's jobs: what to change, in the page's words.
	nightly := "edit:nightly@0s=2s/1.5s"
	code, b = h.do(http.MethodPost, "/api/runs/"+id+"/chaos", dashboard.ChaosRequest{Spec: nightly})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal(b, &e))
	require.Contains(t, e.Error, "nightly works 1.5s, longer than this run's longest job (200ms)")
	require.Contains(t, e.Error, "in the Run form: work 1s or more")
	pageWords(t, e.Error, nightly)
	code, b = h.do(http.MethodGet, "/api/runs/"+id+"/report", nil)
	require.Equal(t, http.StatusConflict, code, "no report before the end: %s", b)
	code, b = h.do(http.MethodPost, "/api/runs/"+id+"/stop", map[string]any{})
	require.Equal(t, http.StatusOK, code, "%s", b)
	var rs runStream
	drain(t, h.stream("/api/runs/"+id+"/events"), &rs, 30*time.Second)
	require.NotNil(t, rs.end)
	require.Less(t, rs.end.Report.Ticks, 100, "stopped early")
	code, b = h.do(http.MethodPost, "/api/runs/"+id+"/chaos", dashboard.ChaosRequest{Spec: "kill:node1@0s"})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, string(b), "the run has ended")
	code, b = h.do(http.MethodGet, "/api/runs/"+id+"/report", nil)
	require.Equal(t, http.StatusOK, code, "%s", b)

	// An event index past the end of a finished run is no event, then
	// its end, at once; a negative or non-numeric one is refused.
	client := &http.Client{Timeout: 30 * time.Second}
	for _, tt := range []struct {
		query, lastID string
		code          int
		want          string
	}{
		{"?from=1000000", "", http.StatusOK, "event: end\n"},
		{"", "999999", http.StatusOK, "event: end\n"},
		{"", "9223372036854775807", http.StatusOK, "event: end\n"},
		{"?from=-1", "", http.StatusBadRequest, `from \"-1\": want an event index, 0 or more`},
		{"?from=x", "", http.StatusBadRequest, `from \"x\": want an event index, 0 or more`},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/api/runs/"+id+"/events"+tt.query, nil)
		require.NoError(t, err)
		if tt.lastID != "" {
			req.Header.Set("Last-Event-ID", tt.lastID)
		}
		res, err := client.Do(req)
		require.NoError(t, err, "%s %s", tt.query, tt.lastID)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err, "%s %s: the stream ends", tt.query, tt.lastID)
		require.Equal(t, tt.code, res.StatusCode, "%s %s: %s", tt.query, tt.lastID, b)
		require.Contains(t, string(b), tt.want, "%s %s", tt.query, tt.lastID)
		require.NotContains(t, string(b), "event: lab", "%s %s", tt.query, tt.lastID)
	}
	m := newMuxed()
	m.read(t, h.stream("/api/stream?watch="+id+":1000000"), map[string]int{id: 1000000}, func() bool { return m.ends[id] != nil }, 30*time.Second)
	require.Empty(t, m.events[id], "no event past the end")
}

// A run whose every PostgreSQL round trip is a minute late (the most a
// spec takes) stops when asked, and answers GET /api/runs/ID all the
// while: its proxies' delays end when they close.
func TestStopUnderLatency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	req := short("pg-lease", true, 100)
	req.Chaos = []string{"latency:postgres=1m"}
	id := h.startRun(req)
	client := &http.Client{Timeout: 30 * time.Second}
	get := func(method, path string) runView {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, h.url+path, nil)
		require.NoError(t, err)
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
			req.Body = io.NopCloser(strings.NewReader("{}"))
		}
		res, err := client.Do(req)
		require.NoError(t, err, "%s %s answers", method, path)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
		var v runView
		require.NoError(t, json.Unmarshal(b, &v), "%s", b)
		return v
	}
	get(http.MethodPost, "/api/runs/"+id+"/stop")
	deadline := time.Now().Add(2 * time.Minute)
	for get(http.MethodGet, "/api/runs/"+id).State != "done" {
		require.True(t, time.Now().Before(deadline), "the run did not end within 2m of its stop")
		time.Sleep(100 * time.Millisecond) // polling the API, as the page does
	}
}

// pageWords requires an error the page shows to be in its words: no flag
// of the aegis command, no fault spec the request sent.
func pageWords(t *testing.T, msg string, sent any) {
	t.Helper()
	require.NotRegexp(t, `--[a-z]`, msg, "no command-line flag in a page's error")
	var specs []string
	switch v := sent.(type) {
	case string:
		specs = []string{v}
	case dashboard.GroupRequest:
		for _, r := range v.Runs {
			specs = append(specs, r.Chaos...)
		}
	}
	for _, spec := range specs {
		if strings.Contains(spec, ":") {
			require.NotContains(t, msg, spec, "no raw spec in a page's error")
		}
	}
}
