package dashboard_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
)

// With a token, every change must carry it; reading needs none, and any
// Host is answered (the dashboard serves the network).
func TestTokenRequired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &dashboard.Config{Token: "s3cret-token"})
	run := dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "none", Nodes: new(1), Tick: "100ms", Duration: "100ms", Work: "10ms"}}}

	code, b := h.do(http.MethodPost, "/api/groups", run)
	require.Equal(t, http.StatusUnauthorized, code, "%s", b)
	require.Contains(t, string(b), "X-Aegis-Token")
	require.NotContains(t, string(b), "s3cret-token", "a refusal does not tell the token")
	code, b = h.do(http.MethodPost, "/api/groups", run, dashboard.TokenHeader, "guess")
	require.Equal(t, http.StatusForbidden, code, "%s", b)
	require.Contains(t, string(b), "wrong token")
	code, _ = h.do(http.MethodPost, "/api/groups/g1/stop", map[string]any{})
	require.Equal(t, http.StatusUnauthorized, code, "every change: stop too")
	code, _ = h.do(http.MethodPost, "/api/runs/x/chaos", map[string]any{"spec": "kill:node1@0s"})
	require.Equal(t, http.StatusUnauthorized, code, "every change: chaos too")
	var groups []groupView
	h.getJSON("/api/groups", &groups)
	require.Empty(t, groups, "nothing started without the token")

	var info struct {
		TokenRequired bool `json:"token_required"`
	}
	h.getJSON("/api/info", &info)
	require.True(t, info.TokenRequired)
	code, _ = h.do(http.MethodGet, "/api/info", nil, "Host", "lab.example.com:7070")
	require.Equal(t, http.StatusOK, code, "with a token, the dashboard answers other hosts")

	code, b = h.do(http.MethodPost, "/api/groups", run, dashboard.TokenHeader, "s3cret-token")
	require.Equal(t, http.StatusCreated, code, "%s", b)
}

// Without a token the dashboard answers loopback names only, and refuses
// changes from other origins, so that a web page the user visits cannot
// drive it.
func TestLoopbackRefusesOtherSites(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	run := dashboard.GroupRequest{Runs: []dashboard.RunRequest{{Strategy: "mutex"}}} // refused anyway if it got through: 400
	tests := []struct {
		name   string
		method string
		header []string
		code   int
		want   string
	}{
		{"rebound DNS name", http.MethodGet, []string{"Host", "attacker.example:7070"}, http.StatusForbidden, "loopback names only"},
		{"rebound DNS name, change", http.MethodPost, []string{"Host", "attacker.example"}, http.StatusForbidden, "loopback names only"},
		{"other origin", http.MethodPost, []string{"Origin", "http://attacker.example"}, http.StatusForbidden, "another origin"},
		{"cross-site fetch", http.MethodPost, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden, "cross-site"},
		{"localhost", http.MethodGet, []string{"Host", "localhost:7070"}, http.StatusOK, ""},
		{"same origin", http.MethodPost, []string{"Origin", h.url, "Sec-Fetch-Site", "same-origin"}, http.StatusBadRequest, "unknown"},
	}
	for _, tt := range tests {
		var body any
		path := "/api/info"
		if tt.method == http.MethodPost {
			body, path = run, "/api/groups"
		}
		code, b := h.do(tt.method, path, body, tt.header...)
		require.Equal(t, tt.code, code, "%s: %s", tt.name, b)
		require.Contains(t, string(b), tt.want, tt.name)
	}
}
