package dashboard_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

func errorOf(t *testing.T, b []byte) string {
	t.Helper()
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	return e.Error
}

// The lab's Redis is one per session: the Redis failover button works on a
// run that has it to itself, and is refused while another run uses it (it
// would lose its server too); while the Redis is failed over, no Redis run
// starts. The session starts its own Redis (private), since the failover
// kills its primary.
func TestRedisFailoverButton(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "two runs at once and the lab's own Redis")
	h := newHarnessOn(t, runner.Servers{PostgresURL: testenv.PostgresURL(t)}, nil)
	redis := func() dashboard.RunRequest {
		r := short("redis", false, 100)
		r.Tick, r.TTL, r.Catalog = "500ms", "1500ms", "export=500ms/200ms" // Redlock-friendly scale, as the lab's Redis tests use
		return r
	}
	withFailover := redis()
	withFailover.Chaos = []string{"failover:redis@1s"}
	code, b := h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{withFailover, redis()}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, errorOf(t, b), "must be the only Redis run")
	g := h.start(dashboard.GroupRequest{Runs: []dashboard.RunRequest{redis(), redis()}})
	first, second := g.Runs[0].ID, g.Runs[1].ID
	code, b = h.do(http.MethodPost, "/api/runs/"+first+"/chaos", dashboard.ChaosRequest{Spec: "failover:redis@0s"})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, errorOf(t, b), "uses the lab's Redis too")

	code, b = h.do(http.MethodPost, "/api/runs/"+second+"/stop", map[string]any{})
	require.Equal(t, http.StatusOK, code, "%s", b)
	var rs runStream
	drain(t, h.stream("/api/runs/"+second+"/events"), &rs, 30*time.Second)
	h.waitGroupRun(g.ID, 1, "done", 10*time.Second)

	events := h.stream("/api/runs/" + first + "/events")
	code, b = h.do(http.MethodPost, "/api/runs/"+first+"/chaos", dashboard.ChaosRequest{Spec: "failover:redis@0s"})
	require.Equal(t, http.StatusOK, code, "%s", b)
	var fo runStream
	for {
		e, ok := next(t, events, &fo, 30*time.Second)
		require.True(t, ok, "the run ended before the failover:\n%s", dump(fo.events))
		if e.Kind == lab.EventChaos && strings.Contains(e.Detail, "promoted") {
			break
		}
	}
	code, b = h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{redis()}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, errorOf(t, b), "has failed over or restarted the lab's Redis")
	code, b = h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{short("pg-lease", true, 2)}})
	require.Equal(t, http.StatusCreated, code, "runs without Redis still start: %s", b)

	code, b = h.do(http.MethodPost, "/api/runs/"+first+"/stop", map[string]any{})
	require.Equal(t, http.StatusOK, code, "%s", b)
	drain(t, events, &fo, 60*time.Second)
	require.NotNil(t, fo.end)
	h.waitGroupRun(g.ID, 0, "done", 10*time.Second)
	h.start(dashboard.GroupRequest{Runs: []dashboard.RunRequest{short("redis", true, 1)}}) // Redis healed, free again
}

// On Redis the lab did not start (the shared servers) the session refuses
// a failover or a restart, in a group as injected.
func TestRedisFaultRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	withFailover := short("redis", false, 10)
	withFailover.Chaos = []string{"failover:redis@1s"}
	code, b := h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Runs: []dashboard.RunRequest{withFailover, short("redlock", true, 10)}})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, errorOf(t, b), "the lab never touches servers it did not start")
	pageWords(t, errorOf(t, b), withFailover.Chaos[0])

	id := h.startRun(short("redis", false, 100))
	code, b = h.do(http.MethodPost, "/api/runs/"+id+"/chaos", dashboard.ChaosRequest{Spec: "restart:redis@0s"})
	require.Equal(t, http.StatusConflict, code, "%s", b)
	require.Contains(t, errorOf(t, b), "the lab never touches servers it did not start")
	pageWords(t, errorOf(t, b), "restart:redis@0s")
}
