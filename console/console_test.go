package console_test

import (
	"database/sql"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// fixture is a PostgreSQL schema with what a deployment leaves there: a
// held lease and a released one, a catalog schedule, a run stuck past its
// lease, and a fenced resource.
type fixture struct {
	db    *sql.DB
	pool  *pgxpool.Pool
	held  *aegis.Lease
	owner string // the held lease's secret owner, as the table has it
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	f := &fixture{db: db, pool: pool}

	l, err := pglease.New(pool, nil)
	require.NoError(t, err)
	f.held, err = l.TryAcquire(ctx, "invoice-export/2026-10", time.Minute)
	require.NoError(t, err)
	done, err := l.TryAcquire(ctx, "reconcile/nightly", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, done))
	require.NoError(t, pool.QueryRow(ctx, `SELECT owner FROM aegis_lease WHERE key = $1`, f.held.Key).Scan(&f.owner))

	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "export", Every: time.Minute, Handler: "export"})
	require.NoError(t, err)
	_, err = schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	// What a replica that died mid-run leaves: its row running, its lease
	// over (the reaper has not come by yet).
	_, err = pool.Exec(ctx, `INSERT INTO aegis_schedule_run (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at)
		VALUES ('default', 'export', now() - interval '2 minutes', 73, 'web-2', 1, 'running', now() - interval '2 minutes', now() - interval '1 minute')`)
	require.NoError(t, err)

	require.NoError(t, fence.Migrate(ctx, pool))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, "ledger/2026-10", 41) }))
	// A stale holder came back with token 40; the fence recorded its
	// refusal.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, "ledger/2026-10", 40) })
	require.ErrorIs(t, err, aegis.ErrStale)
	return f
}

func serve(t *testing.T, cfg *console.Config) *httptest.Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s, err := console.New(t.Context(), cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

// client follows no redirect (the tests look at them) and keeps cookies.
func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, header http.Header) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// The pages show what the tables hold, in database time, and never a
// lease's secret owner.
func TestPagesShowTheStore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)

	code, body := get(t, c, ts.URL+"/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "<b>1</b> held of 2 lease keys")
	require.Contains(t, body, "<b>1</b> stuck runs")
	require.Contains(t, body, "<b>1</b> fenced resources")

	code, body = get(t, c, ts.URL+"/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `(?s)data-key="invoice-export/2026-10" data-live="true">.*?<td class="num token">`+strconv.FormatInt(int64(f.held.Token), 10)+`</td>`, body)
	require.Regexp(t, `(?s)data-key="reconcile/nightly" data-live="false">[^\n]*\n[^\n]*released`, body)
	require.NotContains(t, body, f.owner, "the lease's owner is its secret")

	code, body = get(t, c, ts.URL+"/schedules")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-schedule="export" data-paused="false"`)
	require.Contains(t, body, "@every 1m0s")
	require.Regexp(t, `(?s)id="stuck".*data-job="export" data-state="running" data-token="73" class="stuck"`, body)
	require.Regexp(t, `(?s)id="history".*data-job="export" data-state="running" data-token="73" data-attempt="1" class="stuck">.*running \(stuck\)`, body, "its attempt, marked")
	require.Contains(t, body, `href="/schedules/export/pause"`)

	code, body = get(t, c, ts.URL+"/fence")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `data-resource="ledger/2026-10" data-refusals="1"><td><code>ledger/2026-10</code></td><td class="num token">41</td>\n<td class="num warn"><a class="refusals" href="/fence\?resource=ledger%2f2026-10#refusals">1</a></td><td class="num">40</td><td class="num">41</td>`, body)

	code, _ = get(t, c, ts.URL+"/schedules/nope")
	require.Equal(t, http.StatusNotFound, code)
}

// A database without some of Aegis's tables says which, and creates none.
func TestMissingTables(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresSQL(t)
	ts := serve(t, &console.Config{DB: db})
	c := client(t)
	for _, p := range []string{"/", "/leases", "/schedules", "/fence"} {
		code, body := get(t, c, ts.URL+p)
		require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
		require.Contains(t, body, "This database has no table", p)
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&n))
	require.Zero(t, n, "the console created no table")
}

// Pause asks first, and takes effect only from the console's own form.
func TestPauseWithConfirmation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)
	code, body := get(t, c, ts.URL+"/schedules/export/pause")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "No replica starts a tick of &#34;export&#34;")
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "the confirmation has a CSRF field: %s", body)

	code, _, _ = post(t, c, ts.URL+"/schedules/export/pause", url.Values{}, nil)
	require.Equal(t, http.StatusForbidden, code, "no CSRF field")
	code, _, _ = post(t, c, ts.URL+"/schedules/export/pause", url.Values{"csrf": {m[1]}}, http.Header{"Origin": {"https://evil.example"}})
	require.Equal(t, http.StatusForbidden, code, "another origin")
	code, _, _ = post(t, c, ts.URL+"/schedules/export/pause", url.Values{"csrf": {m[1]}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
	require.Equal(t, http.StatusForbidden, code, "cross-site")
	cat, err := schedule.NewCatalog(t.Context(), f.db, nil)
	require.NoError(t, err)
	e, err := cat.Get(t.Context(), "export")
	require.NoError(t, err)
	require.False(t, e.Paused, "no refused request paused it")

	code, _, resp := post(t, c, ts.URL+"/schedules/export/pause", url.Values{"csrf": {m[1]}}, http.Header{"Origin": {ts.URL}})
	require.Equal(t, http.StatusSeeOther, code)
	e, err = cat.Get(t.Context(), "export")
	require.NoError(t, err)
	require.True(t, e.Paused)
	code, body = get(t, c, ts.URL+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Paused: no replica starts a tick of it from now on")
	require.Contains(t, body, `data-schedule="export" data-paused="true"`)
	require.Contains(t, body, `href="/schedules/export/resume"`)

	code, _, _ = post(t, c, ts.URL+"/schedules/nope/pause", url.Values{"csrf": {m[1]}}, nil)
	require.Equal(t, http.StatusNotFound, code)
}

// Read-only shows no control and refuses every change.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := serve(t, &console.Config{DB: f.db, ReadOnly: true})
	c := client(t)
	code, body := get(t, c, ts.URL+"/schedules")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "/pause")
	require.Contains(t, body, "read-only")
	code, _ = get(t, c, ts.URL+"/schedules/export/pause")
	require.Equal(t, http.StatusForbidden, code)
	// Even with a CSRF field taken from a writable console of the same
	// database, a read-only console refuses.
	code, _, _ = post(t, c, ts.URL+"/schedules/export/pause", url.Values{"csrf": {"00"}}, nil)
	require.Equal(t, http.StatusForbidden, code)
}

// Away from loopback every request needs the token or the user; on
// loopback, a Host that is not loopback (DNS rebinding) is refused.
func TestAccess(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := console.New(t.Context(), &console.Config{DB: f.db, Addr: "0.0.0.0:7080"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "not loopback")
	_, err = console.New(t.Context(), &console.Config{DB: f.db, Addr: "127.0.0.1:7080", User: "ops"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = console.New(t.Context(), nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = console.New(t.Context(), &console.Config{})
	require.ErrorIs(t, err, aegis.ErrInvalid)

	const token = "console-test-token"
	ts := serve(t, &console.Config{DB: f.db, Addr: "0.0.0.0:7080", Token: token})
	c := client(t)
	for _, p := range []string{"/", "/leases", "/schedules", "/fence", "/schedules/export/pause", "/style.css"} {
		code, body := get(t, c, ts.URL+p)
		require.Equal(t, http.StatusUnauthorized, code, "%s without the token", p)
		require.NotContains(t, body, "export")
	}
	code, _, _ := post(t, c, ts.URL+"/schedules/export/pause", url.Values{}, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/leases", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "a Bearer token")

	code, _ = get(t, c, ts.URL+"/leases?token=wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	resp, err = c.Get(ts.URL + "/leases?token=" + token)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/leases", resp.Header.Get("Location"), "the token leaves the address")
	code, _ = get(t, c, ts.URL+"/leases")
	require.Equal(t, http.StatusOK, code, "the cookie the first visit set")

	basic := serve(t, &console.Config{DB: f.db, Addr: "0.0.0.0:7080", User: "ops", Password: "pw-for-test"})
	resp, err = client(t).Get(basic.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")
	req, err = http.NewRequest(http.MethodGet, basic.URL+"/", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", "wrong")
	resp, err = client(t).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req.SetBasicAuth("ops", "pw-for-test")
	resp, err = client(t).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	local := serve(t, &console.Config{DB: f.db})
	req, err = http.NewRequest(http.MethodGet, local.URL+"/", nil)
	require.NoError(t, err)
	req.Host = "evil.example"
	resp, err = client(t).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a rebound DNS name")
}

// On SQLite the same pages read the same tables.
func TestSQLite(t *testing.T) {
	t.Parallel()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "aegis.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	l, err := sqlitelease.New(db, nil)
	require.NoError(t, err)
	lease, err := l.TryAcquire(t.Context(), "report/daily", time.Minute)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: db})
	code, body := get(t, client(t), ts.URL+"/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `(?s)data-key="report/daily" data-live="true">.*?<td class="num token">`+strconv.FormatInt(int64(lease.Token), 10)+`</td>`, body)
	code, body = get(t, client(t), ts.URL+"/schedules")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "no table <code>aegis_schedule</code>")
}

// A catalog row the catalog cannot read (a hand edit) does not hide the
// others: the pages show it as unreadable, with why.
func TestUnreadableCatalogRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cat, err := schedule.NewCatalog(t.Context(), f.db, nil)
	require.NoError(t, err)
	_, err = cat.Put(t.Context(), schedule.Entry{Name: "bad", Every: time.Minute, Handler: "h"})
	require.NoError(t, err)
	_, err = f.db.Exec(`UPDATE aegis_schedule SET spec = '@every banana' WHERE name = 'bad'`)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)

	code, body := get(t, c, ts.URL+"/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<b>1</b> schedules, 0 paused, <span class="warn" id="unreadable">1 unreadable</span>`)
	unreadable := `<tr class="unreadable" data-schedule="bad"><td>bad</td><td colspan="8"><b class="warn">unreadable</b>: schedule: catalog row &#34;bad&#34;: spec &#34;@every banana&#34; is not an interval</td></tr>`
	for _, page := range []string{"/schedules", "/schedules/bad"} {
		code, body = get(t, c, ts.URL+page)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, unreadable, page)
		require.Equal(t, page == "/schedules", strings.Contains(body, `data-schedule="export"`), "%s: the readable rows too", page)
	}
}
