package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// harness is a dashboard over a lab session on the shared test servers
// (isolated by a schema and the runs' own keys), whose nodes are this test
// binary, served by an httptest server.
type harness struct {
	t    *testing.T
	dash *dashboard.Server
	srv  *httptest.Server
	url  string
	dir  string // the session's directory
}

func newHarness(t *testing.T, cfg *dashboard.Config) *harness {
	t.Helper()
	return newHarnessOn(t, runner.Servers{
		PostgresURL:   testenv.PostgresURL(t),
		RedisAddrs:    testenv.RedisAddrs(t),
		EtcdEndpoints: testenv.EtcdEndpoints(t),
		ZKServers:     testenv.ZKServers(t),
		NATSURLs:      testenv.NATSURLs(t),
	}, cfg)
}

// newHarnessOn is a harness whose session uses the servers given and
// starts the others itself (privately, stopped at the end of the test).
func newHarnessOn(t *testing.T, given runner.Servers, cfg *dashboard.Config) *harness {
	t.Helper()
	dir := t.TempDir()
	s, err := runner.NewSession(runner.Options{
		Dir:     dir,
		Servers: given,
		NodeEnv: []string{nodeEnv},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	d, err := dashboard.New(s, cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return &harness{t: t, dash: d, srv: srv, url: srv.URL, dir: dir}
}

// do sends a request and returns the status and body. A body that is not
// nil is sent as JSON.
func (h *harness) do(method, path string, body any, header ...string) (int, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(h.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.url+path, rd)
	require.NoError(h.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	res, err := h.srv.Client().Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	return res.StatusCode, b
}

// doRaw sends body as it is, as JSON unless the header pairs say
// otherwise.
func (h *harness) doRaw(method, path, body string, header ...string) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.url+path, strings.NewReader(body))
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := h.srv.Client().Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	return res.StatusCode, b
}

// getJSON GETs path, requires a 200 and decodes the body into v.
func (h *harness) getJSON(path string, v any) {
	h.t.Helper()
	code, b := h.do(http.MethodGet, path, nil)
	require.Equal(h.t, http.StatusOK, code, "%s", b)
	require.NoError(h.t, json.Unmarshal(b, v), "%s", b)
}

// Views of the API's answers, as a client reads them.
type runView struct {
	Index       int    `json:"index"`
	ID          string `json:"id"`
	Group       string `json:"group"`
	State       string `json:"state"`
	Error       string `json:"error"`
	Unavailable string `json:"unavailable"`
	Config      struct {
		Strategy string   `json:"strategy"`
		Fenced   bool     `json:"fenced"`
		Nodes    int      `json:"nodes"`
		Ticks    int      `json:"ticks"`
		Chaos    []string `json:"chaos"`
	} `json:"config"`
	Report *reportView `json:"report"`
}

type reportView struct {
	Ticks             int      `json:"ticks"`
	Executions        int      `json:"executions"`
	DuplicateTicks    int      `json:"duplicate_ticks"`
	DuplicatesApplied int      `json:"duplicates_applied"`
	StaleRejected     int      `json:"stale_rejected"`
	MissedTicks       int      `json:"missed_ticks"`
	LostUpdates       int64    `json:"lost_updates"`
	Checker           string   `json:"checker"`
	Visualisation     string   `json:"visualisation"`
	StoreAgrees       bool     `json:"store_agrees"`
	Notes             []string `json:"notes"`
	Unsafe            []string `json:"unsafe"`
	Jobs              []struct {
		Name  string `json:"name"`
		Ticks int    `json:"ticks"`
	} `json:"jobs"`
}

type groupView struct {
	ID       string    `json:"id"`
	Scenario string    `json:"scenario"`
	Done     bool      `json:"done"`
	Stopped  bool      `json:"stopped"`
	Runs     []runView `json:"runs"`
}

// start starts a group and returns it as the API answered (its first
// wave started).
func (h *harness) start(req dashboard.GroupRequest) groupView {
	h.t.Helper()
	testenv.Reserve(h.t, 1, "the dashboard's runs")
	code, b := h.do(http.MethodPost, "/api/groups", req)
	require.Equal(h.t, http.StatusCreated, code, "%s", b)
	var g groupView
	require.NoError(h.t, json.Unmarshal(b, &g))
	return g
}

// startRun starts one run and returns its id.
func (h *harness) startRun(req dashboard.RunRequest) string {
	h.t.Helper()
	g := h.start(dashboard.GroupRequest{Runs: []dashboard.RunRequest{req}})
	require.Len(h.t, g.Runs, 1)
	require.Equal(h.t, "running", g.Runs[0].State, "%+v", g.Runs[0])
	require.NotEmpty(h.t, g.Runs[0].ID)
	return g.Runs[0].ID
}

// waitGroup follows the groups stream until the group is done, within d.
func (h *harness) waitGroup(id string, d time.Duration) groupView {
	h.t.Helper()
	events := h.stream("/api/stream")
	timer := time.NewTimer(d)
	defer timer.Stop()
	var last groupView
	for {
		select {
		case ev, ok := <-events:
			require.True(h.t, ok, "the groups stream ended")
			require.Equal(h.t, "groups", ev.Event)
			var gs []groupView
			require.NoError(h.t, json.Unmarshal([]byte(ev.Data), &gs))
			for _, g := range gs {
				if g.ID == id {
					last = g
				}
			}
			if last.Done {
				return last
			}
		case <-timer.C:
			h.t.Fatalf("group %s not done after %s: %+v", id, d, last)
		}
	}
}

// waitGroupRun follows the groups stream until the group's run index is in
// state, within d.
func (h *harness) waitGroupRun(id string, index int, state string, d time.Duration) {
	h.t.Helper()
	events := h.stream("/api/stream")
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-events:
			require.True(h.t, ok, "the groups stream ended")
			var gs []groupView
			require.NoError(h.t, json.Unmarshal([]byte(ev.Data), &gs))
			for _, g := range gs {
				if g.ID == id && g.Runs[index].State == state {
					return
				}
			}
		case <-timer.C:
			h.t.Fatalf("run %d of group %s not %s after %s", index, id, state, d)
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	ID    string
	Event string
	Data  string
}

// stream opens a server-sent event stream and returns its events; the
// channel closes when the server ends the stream or the test ends.
func (h *harness) stream(path string, header ...string) <-chan sseEvent {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+path, nil)
	require.NoError(h.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := h.srv.Client().Do(req)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusOK, res.StatusCode)
	require.Equal(h.t, "text/event-stream", res.Header.Get("Content-Type"))
	out := make(chan sseEvent)
	var wg sync.WaitGroup
	h.t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		defer close(out)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Event != "" || ev.Data != "" {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	})
	return out
}

// runStream collects a run's stream until it ends.
type runStream struct {
	events   []lab.Event
	ids      []int
	statuses []runner.Status
	end      *struct {
		Report *reportView `json:"report"`
		Error  string      `json:"error"`
	}
}

// next reads the stream's next lab event, skipping status events (which
// it keeps), within d; ok is false when the stream ended.
func next(t *testing.T, events <-chan sseEvent, rs *runStream, d time.Duration) (lab.Event, bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return lab.Event{}, false
			}
			switch ev.Event {
			case "lab":
				var e lab.Event
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &e))
				id, err := strconv.Atoi(ev.ID)
				require.NoError(t, err, "a lab event's id is its index: %q", ev.ID)
				rs.events = append(rs.events, e)
				rs.ids = append(rs.ids, id)
				return e, true
			case "status":
				var st runner.Status
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &st))
				rs.statuses = append(rs.statuses, st)
			case "end":
				require.Nil(t, rs.end, "a second end event")
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &rs.end))
			default:
				t.Fatalf("unexpected event %q: %s", ev.Event, ev.Data)
			}
		case <-timer.C:
			t.Fatalf("no event within %s; events so far:\n%s", d, dump(rs.events))
		}
	}
}

// drain reads the stream until it ends, within d.
func drain(t *testing.T, events <-chan sseEvent, rs *runStream, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if _, ok := next(t, events, rs, time.Until(deadline)); !ok {
			return
		}
	}
}

// runReport fetches a run's JSON report.
func (h *harness) runReport(t *testing.T, id string) lab.Report {
	t.Helper()
	code, b := h.do(http.MethodGet, "/api/runs/"+id+"/report", nil)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var rep lab.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep
}

// sameRead reports whether two attempts of one tick read the same balance.
func sameRead(events []lab.Event) bool {
	seen := map[[2]int64]bool{} // (tick, balance read)
	for _, e := range events {
		if e.Kind == lab.EventEntered && e.Value != nil {
			k := [2]int64{int64(e.Tick), *e.Value}
			if seen[k] {
				return true
			}
			seen[k] = true
		}
	}
	return false
}

// takenOver returns the attempt a paused node was inside when it was
// paused, when another node entered the same tick before it resumed.
func takenOver(events []lab.Event) (string, bool) {
	node, from, to := 0, 0.0, math.Inf(1)
	for _, e := range events {
		switch {
		case node == 0 && e.Kind == lab.EventChaos && strings.Contains(e.Detail, "paused with SIGSTOP"):
			node, from = e.Node, e.T
		case node != 0 && e.Kind == lab.EventHealed && e.Node == node:
			to = min(to, e.T)
		}
	}
	attempt, tick, ended := "", 0, map[string]bool{}
	for _, e := range events {
		switch {
		case e.T > from:
		case e.Kind == lab.EventEntered && e.Node == node:
			attempt, tick = e.Attempt, e.Tick
		case e.Kind == lab.EventExecuted || e.Kind == lab.EventStale || e.Kind == lab.EventAbandon:
			ended[e.Attempt] = true
		}
	}
	if node == 0 || attempt == "" || ended[attempt] {
		return "", false
	}
	for _, e := range events {
		if e.Kind == lab.EventEntered && e.Node != node && e.Tick == tick && e.T >= from && e.T <= to {
			return attempt, true
		}
	}
	return "", false
}

// misfiredCount is how many of a node's job ticks a misfired event
// stands for: one, or the N of "N ticks dropped by policy skip".
func misfiredCount(e lab.Event) int {
	if m := droppedRE.FindStringSubmatch(e.Detail); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 1
}

var droppedRE = regexp.MustCompile(`^(\d+) ticks dropped by policy`)

func dump(events []lab.Event) string {
	var b strings.Builder
	for _, e := range events {
		v := ""
		if e.Value != nil {
			v = fmt.Sprintf(" value %d", *e.Value)
		}
		fmt.Fprintf(&b, "%7.3f node%d %s tick %d token %d %s%s %s\n", e.T, e.Node, e.Kind, e.Tick, e.Token, e.Attempt, v, e.Detail)
	}
	return b.String()
}

// short is a run of 400 ms ticks, as the lab's own tests use: 200 ms of
// work is the margin to pause the holder before it writes, and a 500 ms
// TTL lets a holder paused for 1.5 s be replaced within its tick.
// short is a run of one job (a tick of work every tick), so that its
// counts are per tick.
func short(strategy string, fence bool, ticks int) dashboard.RunRequest {
	return dashboard.RunRequest{Strategy: strategy, Fence: &fence, Nodes: new(3), Tick: "400ms", Work: "200ms", TTL: "500ms",
		Duration: (time.Duration(ticks) * 400 * time.Millisecond).String(), Catalog: "export=400ms/200ms"}
}
