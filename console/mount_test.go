package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/queue"
)

const prefix = "/admin/aegis"

// New refuses a Prefix the handler could not be mounted under, and
// CallerAuthenticates with credentials of the console's own; each error
// names the field.
func TestMountConfigRefused(t *testing.T) {
	t.Parallel()
	db := newFixture(t).db
	for _, p := range []string{"admin", "/admin/", "/", "/admin?x", "/admin#x", "/admin\xff", "//admin", "/admin//aegis", "/admin/./aegis", "/admin/../aegis", "/admin/..", "/admin aegis", "/admin%2Faegis"} {
		_, err := console.New(t.Context(), &console.Config{DB: db, Addr: "127.0.0.1:0", Prefix: p})
		require.ErrorIs(t, err, aegis.ErrInvalid, "Prefix %q", p)
		require.ErrorContains(t, err, "Config.Prefix", "Prefix %q", p)
	}
	for _, c := range []console.Config{{Token: "t"}, {User: "ops", Password: "pw-for-test"}} {
		c.DB, c.CallerAuthenticates = db, true
		_, err := console.New(t.Context(), &c)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, "Config.CallerAuthenticates")
		require.NotContains(t, err.Error(), "pw-for-test")
	}
	for _, p := range []string{"/admin/aegis", "/a", "/ops/aegis-console_1.2~x"} {
		_, err := console.New(t.Context(), &console.Config{DB: db, Addr: "127.0.0.1:0", Prefix: p})
		require.NoError(t, err, "Prefix %q", p)
	}
}

// mounted serves cfg's console in a program's own mux under prefix, next
// to a route of the program's.
func mounted(t *testing.T, cfg *console.Config) *httptest.Server {
	t.Helper()
	cfg.Prefix = prefix
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s, err := console.New(t.Context(), cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.Handle(prefix+"/", s)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

// Served by itself under a prefix, the handler answers nothing outside
// it, and sends the bare prefix to its overview.
func TestPrefixOutside(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := serve(t, &console.Config{DB: f.db, Prefix: prefix})
	c := client(t)
	for _, p := range []string{"/", "/leases", "/style.css", "/admin", "/admin/aegisx", "/admin/aegisx/leases", "/admin/leases"} {
		code, body := get(t, c, ts.URL+p)
		require.Equal(t, http.StatusNotFound, code, "%s: %s", p, body)
	}
	resp, err := c.Get(ts.URL + prefix)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	require.Equal(t, prefix+"/", resp.Header.Get("Location"))
	code, body := get(t, c, ts.URL+prefix+"/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/admin/aegis/leases"`)
	// A path to clean: the redirect to its clean form keeps the prefix.
	for p, want := range map[string]string{"/./leases": "/leases", "//leases": "/leases", "/schedules/../fence": "/fence"} {
		resp, err := c.Get(ts.URL + prefix + p)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 3, resp.StatusCode/100, p)
		require.Equal(t, prefix+want, resp.Header.Get("Location"), p)
	}
}

// linkRE finds the addresses a page links to or posts to.
var linkRE = regexp.MustCompile(`(?:href|action)="([^"]*)"`)

// Every page of a console mounted under a prefix, on a database with data
// in each, links and posts only under the prefix, and every link
// resolves: a crawl from the overview meets no 404 and no address outside.
func TestPrefixCrawl(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	historytest.Make(t, historytest.OpenPostgres(t))
	q := newQueueFixture(t) // the test's schema, as f's
	live := q.enqueue(t, mailArgs{To: "a@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	dead := q.enqueue(t, mailArgs{To: "b@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	require.NoError(t, q.admin.CancelJob(t.Context(), dead, "not wanted"))

	ts := mounted(t, &console.Config{DB: f.db})
	c := client(t)
	seen := map[string]bool{prefix + "/": true}
	todo := []string{prefix + "/"}
	for len(todo) > 0 {
		at := todo[0]
		todo = todo[1:]
		resp, err := c.Get(ts.URL + at)
		require.NoError(t, err)
		code, body := resp.StatusCode, readBody(t, resp)
		require.Equal(t, http.StatusOK, code, "%s: %s", at, body)
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(body, -1) {
			u, err := url.Parse(html.UnescapeString(m[1]))
			require.NoError(t, err, "%s links to %q", at, m[1])
			if u.Scheme == "" && u.Host == "" && u.Path == "" && u.RawQuery == "" {
				continue // a place on the same page (#words)
			}
			require.True(t, u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, prefix+"/"), "%s links to %q, outside %s", at, m[1], prefix)
			u.Fragment = ""
			if !seen[u.String()] {
				seen[u.String()] = true
				todo = append(todo, u.String())
			}
		}
	}
	for _, p := range []string{
		"/", "/style.css", "/leases", "/leases/invoice-export%2F2026-10", "/schedules", "/schedules/export", "/schedules/nightly", "/schedules/orphan",
		"/schedules/export/pause", "/schedules/export/run-now", "/queue", fmt.Sprintf("/queue/jobs/%d", live), fmt.Sprintf("/queue/jobs/%d/cancel", live),
		fmt.Sprintf("/queue/jobs/%d/retry", dead), "/fence",
	} {
		require.True(t, seen[prefix+p], "the crawl reached %s; it saw %v", prefix+p, seen)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// A change through its confirmation works under the prefix, with the
// CSRF and origin checks on, and its redirect stays under the prefix.
func TestPrefixChanges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	q := newQueueFixture(t) // the test's schema, as f's
	job := q.enqueue(t, mailArgs{To: "a@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	ts := mounted(t, &console.Config{DB: f.db})
	c := client(t)

	confirm := func(path string) string {
		t.Helper()
		code, body := get(t, c, ts.URL+path)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `action="`+path+`"`)
		m := csrfRE.FindStringSubmatch(body)
		require.NotNil(t, m, "the confirmation has a CSRF field: %s", body)
		code, _, _ = post(t, c, ts.URL+path, url.Values{}, http.Header{"Origin": {ts.URL}})
		require.Equal(t, http.StatusForbidden, code, "%s: no CSRF field", path)
		code, _, _ = post(t, c, ts.URL+path, url.Values{"csrf": {m[1]}}, http.Header{"Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, code, "%s: another origin", path)
		return m[1]
	}

	pause := prefix + "/schedules/export/pause"
	csrf := confirm(pause)
	code, _, resp := post(t, c, ts.URL+pause, url.Values{"csrf": {csrf}}, http.Header{"Origin": {ts.URL}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, prefix+"/schedules/export?done=paused", resp.Header.Get("Location"))
	code, body := get(t, c, ts.URL+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-schedule="export" data-paused="true"`)
	require.Contains(t, body, `href="/admin/aegis/schedules/export/resume"`)

	cancel := fmt.Sprintf("%s/queue/jobs/%d/cancel", prefix, job)
	csrf = confirm(cancel)
	require.Equal(t, queue.StateAvailable, q.state(t, job), "no refused request cancelled it")
	code, _, resp = post(t, c, ts.URL+cancel, url.Values{"csrf": {csrf}}, http.Header{"Origin": {ts.URL}})
	require.Equal(t, http.StatusSeeOther, code)
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), prefix+"/"), resp.Header.Get("Location"))
	code, body = get(t, c, ts.URL+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, queue.StateCancelled, q.state(t, job))
}

// With CallerAuthenticates the program's middleware is the access rule:
// the console serves any Host on any address, and still checks a change's
// origin. Without it, under a prefix too, the loopback and Host rules stay.
func TestCallerAuthenticates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// getAs gets the leases from ts as the program's clients do: by a
	// name that is not loopback.
	getAs := func(ts *httptest.Server) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ts.URL+prefix+"/leases", nil)
		require.NoError(t, err)
		req.Host = "ops.example.com"
		resp, err := client(t).Do(req)
		require.NoError(t, err)
		return resp.StatusCode, readBody(t, resp)
	}
	ts := mounted(t, &console.Config{DB: f.db, Addr: "0.0.0.0:8080", CallerAuthenticates: true})
	code, body := getAs(ts)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-key="invoice-export/2026-10"`)
	code, _, _ = post(t, client(t), ts.URL+prefix+"/schedules/export/pause", url.Values{}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
	require.Equal(t, http.StatusForbidden, code, "a change's checks stay")

	_, err := console.New(t.Context(), &console.Config{DB: f.db, Addr: "0.0.0.0:8080", Prefix: prefix})
	require.ErrorIs(t, err, aegis.ErrInvalid, "without it, a non-loopback address needs credentials")
	code, body = getAs(mounted(t, &console.Config{DB: f.db}))
	require.Equal(t, http.StatusForbidden, code, "a loopback console serves loopback names only: %s", body)
}

// Under a prefix the token's cookie is the prefix's, and the first visit's
// redirect stays under it.
func TestPrefixTokenCookie(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const token = "console-mount-token"
	ts := mounted(t, &console.Config{DB: f.db, Addr: "0.0.0.0:8080", Token: token})
	c := client(t)
	code, _ := get(t, c, ts.URL+prefix+"/leases")
	require.Equal(t, http.StatusUnauthorized, code)
	resp, err := c.Get(ts.URL + prefix + "/leases?token=" + token)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, prefix+"/leases", resp.Header.Get("Location"))
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	require.Equal(t, prefix, cookies[0].Path)
	require.True(t, cookies[0].HttpOnly)
	code, body := get(t, c, ts.URL+prefix+"/leases")
	require.Equal(t, http.StatusOK, code, body)
	code, _ = get(t, c, ts.URL+"/healthz")
	require.Equal(t, http.StatusOK, code, "the program's own route")
}
