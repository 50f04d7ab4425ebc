package console_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// refusalRow finds the row of table#refusals for resource's refused token
// and held token, and returns it.
func refusalRow(t *testing.T, body, resource string, token, held aegis.Token) string {
	t.Helper()
	table := regexp.MustCompile(`(?s)<table id="refusals">.*?</table>`).FindString(body)
	require.NotEmpty(t, table, "table#refusals:\n%s", body)
	row := regexp.MustCompile(fmt.Sprintf(`(?s)<tr data-resource="%s" data-token="%d" data-held="%d">.*?</tr>`, regexp.QuoteMeta(resource), token, held)).FindString(table)
	require.NotEmpty(t, row, "a row of %s refusing token %d with %d held:\n%s", resource, token, held, table)
	return row
}

// A holder paused past its lease's TTL, its lease taken over by another
// node, writes late through fence.CheckLease and is refused: /fence shows
// the refusal with its node (from the grant history), its token, the
// token held, and a link to the lease key, with nothing in the program but
// the check (no CountRefusal). The key's page links back to it; the
// overview's card counts it and names the writer.
func TestFenceShowsThePausedHolder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, db := pgLeases(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	nodeA, err := pglease.New(pool, &pglease.Config{Holder: "node-a", History: 10})
	require.NoError(t, err)
	nodeB, err := pglease.New(pool, &pglease.Config{Holder: "node-b", History: 10})
	require.NoError(t, err)

	const key, resource = "nightly/export", "ledger/2026-10"
	a, err := nodeA.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err)
	// node-a pauses: it stops renewing. node-b is granted the key once
	// the lease expired, and writes.
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := nodeB.Acquire(bctx, key, time.Minute)
	require.NoError(t, err, "node-b is granted the key after node-a's TTL")
	require.Greater(t, b.Token, a.Token)
	write := func(l aegis.Lease) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.CheckLease(ctx, tx, resource, l) })
	}
	require.NoError(t, write(*b))
	// node-a wakes up and writes late, in a traced request.
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 0x2f}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.CheckLease(trace.ContextWithSpanContext(ctx, sc), tx, resource, *a)
	})
	require.ErrorIs(t, err, aegis.ErrStale, "the fence refuses the paused holder")

	ts := serve(t, &console.Config{DB: db, TraceURL: "http://jaeger.example:16686/trace/{trace_id}"})
	c := client(t)
	code, body := get(t, c, ts.URL+"/fence")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "CountRefusal", "the page no longer says refusals are counted where the code asks")
	row := refusalRow(t, body, resource, a.Token, b.Token)
	require.Regexp(t, `<td class="writer"><span title="from the lease&#39;s grant history">node-a</span></td>`, row)
	require.Contains(t, row, `<a class="lease" href="/leases/nightly%2Fexport"><code>nightly/export</code></a>`)
	require.Contains(t, row, fmt.Sprintf(`<a class="trace" href="http://jaeger.example:16686/trace/%[1]s" rel="noreferrer">%[1]s</a>`, sc.TraceID()))
	require.Regexp(t, `<tr data-resource="ledger/2026-10" data-refusals="1">`, body, "the resource's count")

	// Filtered by the key, from the key's page.
	code, body = get(t, c, ts.URL+"/leases/nightly%2Fexport")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<a id="lease-refusals" href="/fence?key=nightly%2fexport#refusals" class="warn">1 write of this key's holders refused by the fence</a>`)
	code, body = get(t, c, ts.URL+"/fence?key=nightly%2fexport")
	require.Equal(t, http.StatusOK, code, body)
	refusalRow(t, body, resource, a.Token, b.Token)
	code, body = get(t, c, ts.URL+"/fence?key=other")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "No write was refused under this lease key.")

	// Under a prefix, every link of the refusal starts with it.
	mounted := serve(t, &console.Config{DB: db, Prefix: "/admin/aegis"})
	code, body = get(t, c, mounted.URL+"/admin/aegis/fence")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, refusalRow(t, body, resource, a.Token, b.Token), `<a class="lease" href="/admin/aegis/leases/nightly%2Fexport">`)
	code, body = get(t, c, mounted.URL+"/admin/aegis/leases/nightly%2Fexport")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<a id="lease-refusals" href="/admin/aegis/fence?key=nightly%2fexport#refusals"`)
	code, body = get(t, c, mounted.URL+"/admin/aegis/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<a href="/admin/aegis/fence#refusals" id="card-fence-refusals"`)

	// The overview's card.
	code, body = get(t, c, ts.URL+"/")
	require.Equal(t, http.StatusOK, code, body)
	card := regexp.MustCompile(`(?s)<a href="/fence#refusals" id="card-fence-refusals" data-hour="(\d+)" data-day="(\d+)".*?</a>`).FindStringSubmatch(body)
	require.NotNil(t, card, "#card-fence-refusals:\n%s", body)
	require.Equal(t, []string{"1", "1"}, card[1:])
	require.Contains(t, card[0], fmt.Sprintf(`<span class="writer">node-a with token %d</span>`, a.Token))
}

// Without the grant history, the page says the holder was not recorded
// and how to record it.
func TestFenceHolderNotRecordedWithoutHistory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, db := pgLeases(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	l, err := pglease.New(pool, &pglease.Config{Holder: "node-a"})
	require.NoError(t, err)
	a, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, "r", a.Token+5) }))
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.CheckLease(ctx, tx, "r", aegis.Lease{Key: "k", Token: a.Token, Owner: "another"})
	})
	require.ErrorIs(t, err, aegis.ErrStale)
	// The lease row's token is the refused one: its holder is named.
	ts := serve(t, &console.Config{DB: db})
	_, body := get(t, client(t), ts.URL+"/fence")
	require.Contains(t, refusalRow(t, body, "r", a.Token, a.Token+5), `<span title="from the lease row">node-a</span>`)
	// An older token, neither in a history nor in the row.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.CheckLease(ctx, tx, "r", aegis.Lease{Key: "k", Token: a.Token + 2, Owner: "another"})
	})
	require.ErrorIs(t, err, aegis.ErrStale)
	_, body = get(t, client(t), ts.URL+"/fence")
	require.Contains(t, refusalRow(t, body, "r", a.Token+2, a.Token+5), `<td class="writer"><span class="missing">not recorded: turn on History</span></td>`)
}

// On SQLite: a scheduler's handler writes through fence.CheckSQL with its
// run's token after a later writer's (a greater token in the fence), and is
// refused; /fence names the node that ran it, its schedule and attempt,
// with no CountRefusal call. And a paused sqlitelease holder refused by
// CheckLeaseSQL is named from the grant history, as on PostgreSQL.
func TestFenceShowsRefusalsOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "aegis.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, fence.MigrateSQL(ctx, db))
	write := func(ctx context.Context, check func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after a refusal the fence rolled it back already
		if err := check(tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	// A later writer took the resource with a token greater than any run's.
	const later = aegis.Token(math.MaxInt64 / 2)
	require.NoError(t, write(ctx, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "catalog/nightly", later) }))

	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	s, err := schedule.New(&schedule.Config{Node: "node-a", Store: store})
	require.NoError(t, err)
	refused := make(chan error, 1)
	require.NoError(t, s.Add(schedule.Job{Name: "nightly", Every: time.Second, Run: func(ctx context.Context) error {
		token, _ := schedule.TokenFrom(ctx)
		err := write(ctx, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "catalog/nightly", token) })
		select {
		case refused <- err:
		default:
		}
		return err
	}}))
	require.NoError(t, s.Start(ctx))
	err = testenv.Recv(t, refused, time.Minute, "the handler's write")
	s.Stop()
	require.ErrorIs(t, err, aegis.ErrStale)
	se, ok := errors.AsType[*fence.StaleError](err)
	require.True(t, ok)
	require.True(t, se.Recorded, "%v", se.RecordErr)

	// A paused sqlitelease holder, its key taken over.
	nodeA, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "node-a", History: 10})
	require.NoError(t, err)
	nodeB, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "node-b", History: 10})
	require.NoError(t, err)
	a, err := nodeA.TryAcquire(ctx, "export", time.Second)
	require.NoError(t, err)
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := nodeB.Acquire(bctx, "export", time.Minute)
	require.NoError(t, err)
	require.NoError(t, write(ctx, func(tx *sql.Tx) error { return fence.CheckLeaseSQL(ctx, tx, "ledger", *b) }))
	require.ErrorIs(t, write(ctx, func(tx *sql.Tx) error { return fence.CheckLeaseSQL(ctx, tx, "ledger", *a) }), aegis.ErrStale)

	ts := serve(t, &console.Config{DB: db})
	_, body := get(t, client(t), ts.URL+"/fence")
	row := refusalRow(t, body, "catalog/nightly", se.Token, later)
	require.Contains(t, row, `<td class="writer"><span title="from the scheduler&#39;s handler that wrote it">node-a</span></td>`)
	require.Regexp(t, `<a class="attempt" href="/schedules/nightly" title="fire [^"]+">nightly #1</a>`, row)
	row = refusalRow(t, body, "ledger", a.Token, b.Token)
	require.Contains(t, row, `<span title="from the lease&#39;s grant history">node-a</span>`)
	require.Contains(t, row, `<a class="lease" href="/leases/export">`)

	// Both ways: the schedule's page links to its runs' refused writes,
	// which list nightly's and not the lease's.
	_, body = get(t, client(t), ts.URL+"/schedules/nightly")
	require.Contains(t, body, `<a id="fence-of-job" href="/fence?job=nightly#refusals">`)
	_, body = get(t, client(t), ts.URL+"/fence?job=nightly")
	refusalRow(t, body, "catalog/nightly", se.Token, later)
	require.NotContains(t, body, `data-resource="ledger" data-token`, "the lease's refusal is no write of nightly's runs")
	require.Contains(t, body, `id="all-refusals"`)
	_, body = get(t, client(t), ts.URL+"/fence?job=other")
	require.Contains(t, body, "No write was refused in a run of this schedule.")
	// And from a resource to its refusals.
	_, body = get(t, client(t), ts.URL+"/fence")
	require.Contains(t, body, `<a class="refusals" href="/fence?resource=ledger#refusals">1</a>`)
	_, body = get(t, client(t), ts.URL+"/fence?resource=ledger")
	refusalRow(t, body, "ledger", a.Token, b.Token)
	require.NotContains(t, body, `data-resource="catalog/nightly" data-token`, "nightly's refusal is of another resource")
}

// A database whose fence predates the refusal log (version 3: the fence
// and the refusal table) shows its resources and says the log is missing
// and how to get it; the overview has no card of refusals.
func TestFenceWithoutTheRefusalLog(t *testing.T) {
	t.Parallel()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "old.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(t.Context(), `CREATE TABLE aegis_fence (resource text PRIMARY KEY, token bigint NOT NULL, owner_hash text);
CREATE TABLE aegis_fence_refusal (resource text PRIMARY KEY, refusals bigint NOT NULL, last_token bigint NOT NULL, last_held bigint NOT NULL, last_ms bigint NOT NULL);
INSERT INTO aegis_fence VALUES ('r', 7, NULL)`)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: db})
	c := client(t)
	code, body := get(t, c, ts.URL+"/fence")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-resource="r" data-refusals="0">`)
	require.Contains(t, body, `id="no-refusal-log"`)
	require.NotContains(t, body, `<table id="refusals">`)
	code, body = get(t, c, ts.URL+"/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="card-fence"`)
	require.NotContains(t, body, `card-fence-refusals`)
}

// Refusals of leases that are not in this database's lease table (a Redis
// or etcd lease fencing a SQL write): /fence lists each, saying why its
// holder is not known. Two of them answered 500 before: the first call
// learned there was no lease table, the second read it.
func TestFenceRefusalsOfAnotherBackendsLeases(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence-only.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, fence.MigrateSQL(ctx, db))
	check := func(l aegis.Lease) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after a refusal the fence rolled it back already
		if err := fence.CheckLeaseSQL(ctx, tx, "ledger", l); err != nil {
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, check(aegis.Lease{Key: "redis-key", Token: 9, Owner: "b"}))
	for _, tok := range []aegis.Token{3, 4} {
		require.ErrorIs(t, check(aegis.Lease{Key: "redis-key", Token: tok, Owner: "a"}), aegis.ErrStale)
	}
	ts := serve(t, &console.Config{DB: db})
	code, body := get(t, client(t), ts.URL+"/fence")
	require.Equal(t, http.StatusOK, code, body)
	for _, tok := range []aegis.Token{3, 4} {
		require.Contains(t, refusalRow(t, body, "ledger", tok, 9), "not known: the lease is not in this database&#39;s lease table")
	}
}

// A run stuck for a while, under 600 later runs of a frequent schedule:
// the overview counts it and /schedules lists it. Before, both looked
// among the run table's latest 500 (100) rows only and said 0.
func TestStuckRunUnderAFrequentSchedule(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "runs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	now := time.Now().UnixMilli()
	_, err = db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 600)
INSERT INTO aegis_schedule_run (namespace, job, fire_ms, token, node, attempt, state, started_ms, ended_ms, expires_ms)
SELECT 'default', 'heartbeat', $1 - i * 2000, i, 'a', 1, 'succeeded', $1 - i * 2000, $1 - i * 2000 + 5, $1 - i * 2000 + 30000 FROM n`, now)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO aegis_schedule_run (namespace, job, fire_ms, token, node, attempt, state, started_ms, expires_ms)
VALUES ('default', 'nightly', $1, 9000, 'b', 1, 'running', $1, $2)`, now-30*60_000, now-29*60_000)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: db})
	c := client(t)
	_, body := get(t, c, ts.URL+"/")
	require.Contains(t, body, `id="card-stuck-runs" data-count="1"`)
	_, body = get(t, c, ts.URL+"/schedules")
	require.Regexp(t, `(?s)id="stuck".*<tr data-job="nightly" data-state="running" data-token="9000"`, body)
}
