package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// muxed collects the page's one stream: per run, its events (checked to
// come in order, from the index asked for, without a gap), statuses and
// end.
type muxed struct {
	groups int
	events map[string][]lab.Event
	first  map[string]int // the index of each run's first event received
	status map[string]int
	ends   map[string]*struct {
		Run    string      `json:"run"`
		Report *reportView `json:"report"`
		Error  string      `json:"error"`
	}
}

func (m *muxed) read(t *testing.T, events <-chan sseEvent, from map[string]int, until func() bool, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for !until() {
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the stream ended")
			switch ev.Event {
			case "groups":
				m.groups++
			case "lab":
				var b struct {
					Run    string      `json:"run"`
					From   int         `json:"from"`
					Events []lab.Event `json:"events"`
				}
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &b))
				require.NotEmpty(t, b.Events, "a batch has events")
				if _, ok := m.first[b.Run]; !ok {
					m.first[b.Run] = b.From
					require.Equal(t, from[b.Run], b.From, "run %s's first batch starts where it was asked to", b.Run)
				}
				require.Equal(t, m.first[b.Run]+len(m.events[b.Run]), b.From, "run %s's batches follow each other without a gap", b.Run)
				m.events[b.Run] = append(m.events[b.Run], b.Events...)
			case "status":
				var s struct {
					Run    string        `json:"run"`
					Status runner.Status `json:"status"`
				}
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &s))
				require.Equal(t, s.Run, s.Status.Run)
				m.status[s.Run]++
			case "end":
				var e struct {
					Run    string      `json:"run"`
					Report *reportView `json:"report"`
					Error  string      `json:"error"`
				}
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &e))
				require.Nil(t, m.ends[e.Run], "a second end of run %s", e.Run)
				m.ends[e.Run] = &e
			default:
				t.Fatalf("unexpected event %q: %s", ev.Event, ev.Data)
			}
		case <-timer.C:
			t.Fatalf("the stream did not get there within %s: %d groups events, events per run %v, ends %v", d, m.groups, lens(m.events), len(m.ends))
		}
	}
}

func lens(m map[string][]lab.Event) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

func newMuxed() *muxed {
	return &muxed{events: map[string][]lab.Event{}, first: map[string]int{}, status: map[string]int{}, ends: map[string]*struct {
		Run    string      `json:"run"`
		Report *reportView `json:"report"`
		Error  string      `json:"error"`
	}{}}
}

// The page's one stream carries the groups and every watched run's events
// in order and without loss, their statuses and their ends with the
// report; a run watched from its N-th event gets the rest only; the
// events are the report's, one for one.
func TestStreamMultiplexesRuns(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "two runs at once")
	h := newHarness(t, nil)
	g := h.start(dashboard.GroupRequest{Runs: []dashboard.RunRequest{short("none", false, 3), short("pg-lease", true, 3)}})
	a, b := g.Runs[0].ID, g.Runs[1].ID
	require.NotEmpty(t, a)
	require.NotEmpty(t, b)
	from := map[string]int{a: 0, b: 0}
	m := newMuxed()
	m.read(t, h.stream(fmt.Sprintf("/api/stream?watch=%s:0,%s", a, b)), from, func() bool { return len(m.ends) == 2 }, 60*time.Second)
	require.Positive(t, m.groups, "the stream starts with the groups")
	for _, id := range []string{a, b} {
		rep := h.runReport(t, id)
		require.Equal(t, rep.Events, m.events[id], "run %s: the stream's events are the report's", id)
		require.Positive(t, m.status[id], "run %s: statuses", id)
		end := m.ends[id]
		require.Empty(t, end.Error)
		require.NotNil(t, end.Report)
		require.Equal(t, rep.Checker, end.Report.Checker)
		require.Equal(t, rep.Executions, end.Report.Executions)
	}

	// Resumed from event 5 of a run that has ended: the rest, then its end.
	rep := h.runReport(t, a)
	require.Greater(t, len(rep.Events), 5)
	again := newMuxed()
	again.read(t, h.stream("/api/stream?watch="+a+":5"), map[string]int{a: 5}, func() bool { return again.ends[a] != nil }, 30*time.Second)
	require.Equal(t, rep.Events[5:], again.events[a])

	// A run nobody knows is left out; a malformed watch is refused by name.
	unknown := newMuxed()
	unknown.read(t, h.stream("/api/stream?watch=nope:0"), nil, func() bool { return unknown.groups > 0 }, 10*time.Second)
	for _, bad := range []string{a + ":x", a + ":-1", ":3"} {
		code, body := h.do(http.MethodGet, "/api/stream?watch="+bad, nil)
		require.Equal(t, http.StatusBadRequest, code, "%s", body)
		require.Contains(t, errorOf(t, body), "watch")
	}
}
