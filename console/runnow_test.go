package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// replicaOn starts a run-key scheduler on db that has the handlers (default
// "rebuild", which runs the catalog's "rebuild" schedule), and stops it
// (bounded) when the test ends.
func replicaOn(t *testing.T, db *sql.DB, node string, handlers ...string) {
	t.Helper()
	ctx := t.Context()
	st, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err)
	s, err := schedule.New(&schedule.Config{Node: node, Store: st, Catalog: cat})
	require.NoError(t, err)
	if len(handlers) == 0 {
		handlers = []string{"rebuild"}
	}
	for _, h := range handlers {
		require.NoError(t, s.Handle(h, func(context.Context, json.RawMessage) error { return nil }))
	}
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { s.Stop(); close(done) }()
		testenv.Recv(t, done, 30*time.Second, node+" to stop")
	})
	testenv.Recv(t, s.Ready(), 20*time.Second, node+" to read the catalog")
}

// requireRunNowRuns asks for a run now of "rebuild" through the console's
// confirmation and waits for its run to appear on the schedule's page, with
// the node and token the run table has.
func requireRunNowRuns(t *testing.T, ts string, db *sql.DB) {
	t.Helper()
	ctx := t.Context()
	c := client(t)
	code, body := get(t, c, ts+"/schedules/rebuild")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/schedules/rebuild/run-now"`)
	require.NotContains(t, body, `id="run-now"`, "no run now was asked for yet")

	code, body = get(t, c, ts+"/schedules/rebuild/run-now")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "One extra run of &#34;rebuild&#34;")
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "the confirmation has a CSRF field: %s", body)

	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err)
	code, _, _ = post(t, c, ts+"/schedules/rebuild/run-now", url.Values{}, nil)
	require.Equal(t, http.StatusForbidden, code, "no CSRF field")
	code, _, _ = post(t, c, ts+"/schedules/rebuild/run-now", url.Values{"csrf": {m[1]}}, http.Header{"Origin": {"https://evil.example"}})
	require.Equal(t, http.StatusForbidden, code, "another origin")
	e, err := cat.Get(ctx, "rebuild")
	require.NoError(t, err)
	require.True(t, e.RunNow.IsZero(), "no refused request asked for a run")

	code, _, resp := post(t, c, ts+"/schedules/rebuild/run-now", url.Values{"csrf": {m[1]}}, http.Header{"Origin": {ts}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/schedules/rebuild?done=run-now", resp.Header.Get("Location"))
	e, err = cat.Get(ctx, "rebuild")
	require.NoError(t, err)
	require.False(t, e.RunNow.IsZero(), "the request is in the catalog")
	fire := e.RunNow.UTC().Format("2006-01-02 15:04:05.000")
	code, body = get(t, c, ts+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Run now requested: one replica runs it")
	require.Contains(t, body, `id="run-now" data-fire="`+fire+`"`)

	// The run appears, done, with its node and token: its attempt, the
	// claim.
	row := regexp.MustCompile(`data-job="rebuild" data-state="succeeded" data-token="(\d+)" data-attempt="1"><td><a href="/schedules/rebuild">rebuild</a></td><td title="` + regexp.QuoteMeta(fire) + `">[^<]+</td><td class="num">1</td><td>([^<]+)</td>`)
	var got []string
	require.Eventually(t, func() bool {
		// Not get: its require would end this polling goroutine, not the test.
		resp, err := c.Get(ts + "/schedules/rebuild")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got = row.FindStringSubmatch(string(b))
		return err == nil && got != nil
	}, 30*time.Second, 20*time.Millisecond, "the run now's run appears on the page, succeeded")
	st, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	runs, err := st.Runs(ctx, "rebuild", 10)
	require.NoError(t, err)
	require.Len(t, runs, 1, "one run: %+v", runs)
	require.True(t, runs[0].Fire.Equal(e.RunNow))
	require.Equal(t, fmt.Sprint(runs[0].Token), got[1], "the page shows the run's token")
	require.Equal(t, runs[0].Node, got[2], "the page shows the node that ran it")

	// Paused: the page offers no run now, and a request is refused.
	_, err = cat.Pause(ctx, "rebuild")
	require.NoError(t, err)
	_, body = get(t, c, ts+"/schedules/rebuild")
	require.NotContains(t, body, `href="/schedules/rebuild/run-now"`)
	code, body, _ = post(t, c, ts+"/schedules/rebuild/run-now", url.Values{"csrf": {m[1]}}, http.Header{"Origin": {ts}})
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, `"rebuild"`)
	require.Contains(t, body, "paused")
	code, _, _ = post(t, c, ts+"/schedules/nope/run-now", url.Values{"csrf": {m[1]}}, http.Header{"Origin": {ts}})
	require.Equal(t, http.StatusNotFound, code)
}

// Run now from the console on PostgreSQL: two replicas, one run.
func TestRunNowWithConfirmation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cat, err := schedule.NewCatalog(t.Context(), f.db, nil)
	require.NoError(t, err)
	_, err = cat.Put(t.Context(), schedule.Entry{Name: "rebuild", Every: time.Hour, Handler: "rebuild"})
	require.NoError(t, err)
	u := testenv.PostgresURL(t) // the fixture's schema
	for i := range 2 {
		pool, err := pgxpool.New(t.Context(), u)
		require.NoError(t, err)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close(); pool.Close() })
		replicaOn(t, db, fmt.Sprintf("replica-%d", i))
	}
	ts := serve(t, &console.Config{DB: f.db})
	requireRunNowRuns(t, ts.URL, f.db)
}

// The same on SQLite, one host.
func TestRunNowSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aegis.db")
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	cat, err := schedule.NewCatalog(t.Context(), db, nil)
	require.NoError(t, err)
	_, err = cat.Put(t.Context(), schedule.Entry{Name: "rebuild", Every: time.Hour, Handler: "rebuild"})
	require.NoError(t, err)
	rdb, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	replicaOn(t, rdb, "replica-0")
	ts := serve(t, &console.Config{DB: db})
	requireRunNowRuns(t, ts.URL, db)
}

// Read-only: no run now button, and the confirmation and the change are
// refused.
func TestRunNowReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := serve(t, &console.Config{DB: f.db, ReadOnly: true})
	c := client(t)
	code, body := get(t, c, ts.URL+"/schedules/export")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "/run-now")
	code, _ = get(t, c, ts.URL+"/schedules/export/run-now")
	require.Equal(t, http.StatusForbidden, code)
	code, _, _ = post(t, c, ts.URL+"/schedules/export/run-now", url.Values{"csrf": {"00"}}, http.Header{"Origin": {ts.URL}})
	require.Equal(t, http.StatusForbidden, code)
	cat, err := schedule.NewCatalog(t.Context(), f.db, nil)
	require.NoError(t, err)
	e, err := cat.Get(t.Context(), "export")
	require.NoError(t, err)
	require.True(t, e.RunNow.IsZero(), "a read-only console asked for no run")
}

// An operator in Chromium asks for a run now through the confirmation
// (the browser's own form post: its Origin and the CSRF field) and sees
// the run appear with its node and token.
func TestRunNowInChromium(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cat, err := schedule.NewCatalog(t.Context(), f.db, nil)
	require.NoError(t, err)
	_, err = cat.Put(t.Context(), schedule.Entry{Name: "rebuild", Every: time.Hour, Handler: "rebuild"})
	require.NoError(t, err)
	pool, err := pgxpool.New(t.Context(), testenv.PostgresURL(t))
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close(); pool.Close() })
	replicaOn(t, db, "replica-0")
	ts := serve(t, &console.Config{DB: f.db})

	page := chromium.Open(t, 60*time.Second)
	ctx, exceptions, text, do := page.Ctx, page.Exceptions, page.Text, page.Do
	do("open the schedule", chromedp.Navigate(ts.URL+"/schedules/rebuild"), chromedp.WaitVisible(chromedp.CSS(`#catalog`)))
	do("ask to run it now", chromedp.Click(chromedp.CSS(`tr[data-schedule="rebuild"] a[href="/schedules/rebuild/run-now"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	require.Contains(t, text(), "One extra run of")
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#run-now`)))
	require.Contains(t, text(), "Run now requested")
	e, err := cat.Get(t.Context(), "rebuild")
	require.NoError(t, err)
	require.False(t, e.RunNow.IsZero(), "the page's request is in the catalog")

	const done = `tr[data-job="rebuild"][data-state="succeeded"]`
	require.Eventually(t, func() bool {
		if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/schedules/rebuild"), chromedp.WaitVisible(chromedp.CSS(`#catalog`))); err != nil {
			return false
		}
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('`+done+`') !== null`))
		return err == nil && ok
	}, 30*time.Second, 100*time.Millisecond, "the run appears on the reloaded page")
	row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(done)))
	require.NoError(t, err)
	require.Contains(t, row, "replica-0")
	fire, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+done+`').cells[1].title`))
	require.NoError(t, err)
	require.Equal(t, e.RunNow.UTC().Format("2006-01-02 15:04:05.000"), fire, "the fire time, absolute on hover")
	require.Empty(t, exceptions())
}
