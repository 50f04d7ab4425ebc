package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/queue"
)

// FuzzConsoleInput requests the console's pages with fuzzed names, keys,
// job ids and query parameters, on a real PostgreSQL with every table: the
// answer is a page, or a 400 or 404 that says what is wrong; never a 500
// (the store refusing what the URL carried is the request's mistake, not
// the store's failure). An HTML page shows no input unescaped (an
// element in it stays text), and no page the lease's secret owner.
func FuzzConsoleInput(f *testing.F) {
	for _, s := range [][5]string{
		{"export", "k", "24h", "", "ran-twice"},
		{"export", "invoice-export/2026-10", "1", "default", "available"},
		{"nope", "nope", "0", "", "running"},
		{"a/../export", "../leases", "-1", "q", "bogus"},
		{"<script>alert(1)</script>", "<b>k</b>", "<i>", "<q>", "<s>"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	fx := newFixture(f)
	require.NoError(f, queue.Migrate(f.Context(), fx.pool))
	s, err := console.New(f.Context(), &console.Config{DB: fx.db, Addr: "127.0.0.1:0"})
	require.NoError(f, err)
	get := func(t *testing.T, target string) (int, string, string) {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+target, nil)
		req.Host = "127.0.0.1"
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code, w.Header().Get("Content-Type"), w.Body.String()
	}
	// tag is what a page must escape: each input is sent again with it.
	const tag = "<x-fuzz>"
	f.Fuzz(func(t *testing.T, name, key, id, queueName, state string) {
		targets := func(name, key, id, queueName, state string) []string {
			return []string{
				"/schedules/" + url.PathEscape(name),
				"/schedules/" + url.PathEscape(name) + "/pause",
				"/leases/" + url.PathEscape(key),
				"/queue/jobs/" + url.PathEscape(id),
				"/queue/jobs?" + url.Values{"queue": {queueName}, "state": {state}}.Encode(),
				"/schedules?" + url.Values{"show": {state}, "job": {name}, "since": {id}, "handler": {queueName}}.Encode(),
			}
		}
		for _, target := range targets(name, key, id, queueName, state) {
			code, _, body := get(t, target)
			// A redirect is ServeMux's, to the cleaned path of a name "." or "..".
			require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusTemporaryRedirect, http.StatusMovedPermanently},
				code, "GET %s: %s", target, body)
			require.NotContains(t, body, fx.owner, "GET %s shows the lease's owner", target)
		}
		for _, target := range targets(name+tag, key+tag, id+tag, queueName+tag, state+tag) {
			if _, ctype, body := get(t, target); strings.HasPrefix(ctype, "text/html") {
				require.NotContains(t, body, tag, "GET %s shows its input unescaped", target)
			}
		}
	})
}
