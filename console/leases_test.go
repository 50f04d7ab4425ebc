package console_test

import (
	"context"
	"database/sql"
	"fmt"
	"html"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// pgLeases is a PostgreSQL schema of its own, as a pool (for pglease) and
// a database/sql handle (for the console).
func pgLeases(t *testing.T) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), testenv.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	return pool, db
}

// cycle grants key on l and releases it, n times.
func cycle(t *testing.T, l aegis.Locker, key string, n int) {
	t.Helper()
	for range n {
		lease, err := l.TryAcquire(t.Context(), key, time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(t.Context(), lease))
	}
}

// owners reads every owner of the lease table: none may reach a page.
func owners(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT owner FROM aegis_lease`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		out = append(out, o)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}

var grantRE = regexp.MustCompile(`<tr data-token="(\d+)"><td class="num token">\d+</td><td class="holder">([^<]*)</td>`)

// grantsShown are the (token, holder) rows of a key's page, in page order.
func grantsShown(body string) [][2]string {
	var out [][2]string
	for _, m := range grantRE.FindAllStringSubmatch(body, -1) {
		out = append(out, [2]string{m[1], html.UnescapeString(m[2])})
	}
	return out
}

// checkLeasePages is what both stores must show: the holder of each key,
// a link to its page, its grants in token order (newest first) with their
// holders, the trimmed ones gone, and no owner anywhere.
func checkLeasePages(t *testing.T, db *sql.DB, web1, web2 aegis.Locker) {
	t.Helper()
	ctx := t.Context()
	const key = "invoice-export/2026-10?#x"
	cycle(t, web1, key, 3)
	cycle(t, web2, key, 3)
	held, err := web1.TryAcquire(ctx, key, time.Minute) // token 7; History 5 keeps 3..7
	require.NoError(t, err)
	require.Equal(t, aegis.Token(7), held.Token)
	free, err := web2.TryAcquire(ctx, "reconcile", time.Minute)
	require.NoError(t, err)
	require.NoError(t, web2.Release(ctx, free))

	ts := serve(t, &console.Config{DB: db})
	c := client(t)
	code, body := get(t, c, ts.URL+"/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `data-key="invoice-export/2026-10\?#x" data-live="true"><td><a href="/leases/invoice-export%2F2026-10%3F%23x"><code>invoice-export/2026-10\?#x</code></a></td><td class="num token">7</td><td class="holder">web-1 &lt;billing&gt;</td>`, body)
	require.Regexp(t, `data-key="reconcile" data-live="false">.*<td class="holder">web-2</td>\n<td>free</td>`, body, "a released key shows its last holder")
	require.NotContains(t, body, `id="history-off"`)

	code, body = get(t, c, ts.URL+"/leases/invoice-export%2F2026-10%3F%23x")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<td class="token">7</td>`)
	require.Equal(t, [][2]string{{"7", "web-1 <billing>"}, {"6", "web-2"}, {"5", "web-2"}, {"4", "web-2"}, {"3", "web-1 <billing>"}}, grantsShown(body))
	require.Contains(t, body, "Older grants (tokens below 3) were trimmed")
	require.NotContains(t, body, "were made by Lockers without")
	for _, o := range owners(t, db) {
		require.NotContains(t, body, o, "a lease's owner is its secret")
	}
	_, body = get(t, c, ts.URL+"/leases")
	for _, o := range owners(t, db) {
		require.NotContains(t, body, o, "a lease's owner is its secret")
	}

	code, _ = get(t, c, ts.URL+"/leases/nope")
	require.Equal(t, http.StatusNotFound, code)
}

// PostgreSQL: holders on the leases page, a key's last grants on its page.
func TestLeaseHoldersAndGrants(t *testing.T) {
	t.Parallel()
	pool, db := pgLeases(t)
	web1, err := pglease.New(pool, &pglease.Config{Holder: "web-1 <billing>", History: 5})
	require.NoError(t, err)
	web2, err := pglease.New(pool, &pglease.Config{Holder: "web-2", History: 5})
	require.NoError(t, err)
	checkLeasePages(t, db, web1, web2)
}

// SQLite: the same pages from the same tables.
func TestLeaseHoldersAndGrantsSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aegis.db")
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	web1, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "web-1 <billing>", History: 5})
	require.NoError(t, err)
	web2, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "web-2", History: 5})
	require.NoError(t, err)
	checkLeasePages(t, db, web1, web2)
}

// Without the history table the pages say that it is off and how to turn
// it on; a Locker without History leaves a gap that the page names.
func TestGrantHistoryOff(t *testing.T) {
	t.Parallel()
	pool, db := pgLeases(t)
	plain, err := pglease.New(pool, &pglease.Config{Holder: "plain"})
	require.NoError(t, err)
	cycle(t, plain, "k", 2)
	ts := serve(t, &console.Config{DB: db})
	c := client(t)
	for _, p := range []string{"/leases", "/leases/k"} {
		code, body := get(t, c, ts.URL+p)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="history-off">Grant history is off: set <code>History</code>`, p)
	}

	recording, err := pglease.New(pool, &pglease.Config{Holder: "recording", History: 10})
	require.NoError(t, err)
	cycle(t, recording, "k", 1)
	cycle(t, plain, "k", 2)
	code, body := get(t, c, ts.URL+"/leases/k")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, [][2]string{{"3", "recording"}}, grantsShown(body))
	require.Contains(t, body, "The grants after token 3 were made by Lockers without <code>History</code>")
	require.Contains(t, body, "Older grants (tokens below 3) were trimmed, or made before the history was on")
}

// A lease table older than holder names (no holder column) still shows
// its keys, with a dash for the holder; so do rows granted before the
// column was added.
func TestLeasesWithoutHolderColumn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool, db := pgLeases(t)
	l, err := pglease.New(pool, nil)
	require.NoError(t, err)
	lease, err := l.TryAcquire(ctx, "old", time.Minute)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ALTER TABLE aegis_lease DROP COLUMN holder`)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: db})
	c := client(t)
	for _, p := range []string{"/leases", "/leases/old"} {
		code, body := get(t, c, ts.URL+p)
		require.Equal(t, http.StatusOK, code, body)
		require.Regexp(t, `<td class="holder"><span class="missing" title="granted before holder names were recorded">—</span></td>`, body, p)
		require.Regexp(t, `class="(num )?token">1</td>`, body, p)
		require.NotContains(t, body, lease.Owner, p)
	}

	sdb, err := sqlitelease.Open(filepath.Join(t.TempDir(), "old.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sdb.Close() })
	_, err = sdb.ExecContext(ctx, `CREATE TABLE aegis_lease (key TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL, expires_ms INTEGER NOT NULL, granted_ms INTEGER NOT NULL) WITHOUT ROWID`)
	require.NoError(t, err)
	_, err = sdb.ExecContext(ctx, `INSERT INTO aegis_lease VALUES ('v1', 'secret-owner-v1', 41, 0, 0)`)
	require.NoError(t, err)
	ts = serve(t, &console.Config{DB: sdb})
	code, body := get(t, c, ts.URL+"/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `data-key="v1" data-live="false"><td><a href="/leases/v1"><code>v1</code></a></td><td class="num token">41</td><td class="holder"><span class="missing"[^>]*>—</span>`, body)
	require.NotContains(t, body, "secret-owner-v1")
}

// In Chromium, an operator watches a lease move: web-1 holds the key and
// stops renewing (a paused or dead process); once its TTL has passed,
// web-2 is granted it with a greater token, and the reloaded page shows
// the new holder, and the key's page both grants, newest first.
func TestLeaseGrantsInChromium(t *testing.T) {
	t.Parallel()
	pool, db := pgLeases(t)
	web1, err := pglease.New(pool, &pglease.Config{Holder: "web-1", History: 10})
	require.NoError(t, err)
	web2, err := pglease.New(pool, &pglease.Config{Holder: "web-2", History: 10})
	require.NoError(t, err)
	const key = "invoice-export/2026-10"
	first, err := web1.TryAcquire(t.Context(), key, time.Second)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: db})
	page := chromium.Open(t, 60*time.Second)
	ctx, exceptions, do := page.Ctx, page.Exceptions, page.Do
	row := `tr[data-key="invoice-export/2026-10"]`
	cell := func(class string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+` .`+class)))
		require.NoError(t, err)
		return v
	}
	do("open the leases", chromedp.Navigate(ts.URL+"/leases"), chromedp.WaitVisible(chromedp.CSS(`#leases`)))
	require.Equal(t, "web-1", cell("holder"))
	require.Equal(t, fmt.Sprint(first.Token), cell("token"))

	// web-1 renews no more; web-2 waits for the key (bounded).
	wctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	held, err := web2.Acquire(wctx, key, time.Minute)
	require.NoError(t, err, "web-2 is granted the key once web-1's TTL has passed")
	require.Greater(t, held.Token, first.Token)
	do("reload the leases", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#leases`)))
	require.Equal(t, "web-2", cell("holder"))
	require.Equal(t, fmt.Sprint(held.Token), cell("token"))
	if *screenshots {
		page.Screenshot("../docs/console-lease-moved.png")
	}
	do("open the key", chromedp.Click(chromedp.CSS(row+` a`)), chromedp.WaitVisible(chromedp.CSS(`#grants`)))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#grants tbody tr')].map(r => r.cells[0].innerText + ' ' + r.cells[1].innerText)`))
	require.NoError(t, err)
	require.Equal(t, []string{fmt.Sprint(held.Token) + " web-2", fmt.Sprint(first.Token) + " web-1"}, rows)
	if *screenshots {
		page.Screenshot("../docs/console-lease-grants.png")
	}
	require.Empty(t, exceptions())
}
