package console_test

import (
	"database/sql"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// instant is how the pages print a time.
func instant(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") }

// attemptRE matches the row of attempt a on a schedule's page, up to its
// node.
func attemptRE(a schedule.Attempt, class string) string {
	return regexp.QuoteMeta(fmt.Sprintf(`<tr data-job="%s" data-state="%s" data-token="%d" data-attempt="%d"%s><td><a href="/schedules/%s">%s</a></td><td title="%s">`,
		a.Job, a.Outcome, a.Token, a.Attempt, class, a.Job, a.Job, instant(a.Fire))) + `[^<]+ ago</td>` + regexp.QuoteMeta(fmt.Sprintf(`<td class="num">%d</td><td>%s</td>`, a.Attempt, a.Node))
}

// A schedule's page shows every attempt of its ticks, the lost one
// marked, and the missed ticks with their cause, as real schedulers left
// them, on PostgreSQL and on SQLite; the overview counts the last hour's
// missed ticks.
func TestScheduleHistory(t *testing.T) {
	t.Parallel()
	for _, dbName := range []string{"postgres", "sqlite"} {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			// secret is where the store is (the server, the file), which
			// no page shows.
			var open func() *sql.DB
			var secret string
			if dbName == "postgres" {
				open = historytest.OpenPostgres(t)
				u, err := url.Parse(testenv.PostgresURL(t))
				require.NoError(t, err)
				secret = u.Host
			} else {
				secret = filepath.Join(t.TempDir(), "aegis.db")
				open = historytest.OpenSQLite(t, secret)
			}
			h := historytest.Make(t, open)
			ts := serve(t, &console.Config{DB: open()})
			c := client(t)

			code, body := get(t, c, ts.URL+"/schedules/nightly")
			require.Equal(t, http.StatusOK, code, body)
			require.Regexp(t, `(?s)`+attemptRE(h.Successor, "")+`.*`+attemptRE(h.Holder, ` class="lost"`), body, "both attempts of the tick, the successor's first")
			require.Contains(t, body, `<b class="warn" title="refused by the fence: taken over while it ran, it ran to its end and the store refused its outcome write; the tick ran twice, its outcome was recorded once">refused</b>`)
			require.Contains(t, body, `<td class="error">`+template.HTMLEscapeString(h.Holder.Error)+`</td>`)
			require.Contains(t, h.Holder.Error, "the run ended succeeded")
			require.Contains(t, body, "No missed tick on record.")
			require.NotContains(t, body, secret)

			code, body = get(t, c, ts.URL+"/schedules/orphan")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, "No attempt yet.")
			for _, m := range h.Missed {
				require.Equal(t, schedule.CauseUnbound, m.Cause)
				require.Equal(t, "watcher", m.Node)
				require.Regexp(t, regexp.QuoteMeta(fmt.Sprintf(`<tr data-job="orphan" data-cause="unbound" class="missed"><td><a href="/schedules/orphan">orphan</a></td><td title="%s">`, instant(m.Fire)))+`[^<]+ ago`+
					regexp.QuoteMeta(fmt.Sprintf(`</td><td><b class="warn">unbound</b></td><td>%s</td><td>watcher</td><td title="%s">`, template.HTMLEscapeString(m.Detail), instant(m.Recorded)))+`[^<]+ ago</td></tr>`, body)
			}
			require.Contains(t, h.Missed[0].Detail, `has no handler "absent"`)

			code, body = get(t, c, ts.URL+"/schedules")
			require.Equal(t, http.StatusOK, code, body)
			require.Regexp(t, attemptRE(h.Holder, ` class="lost"`), body, "every schedule's attempts")
			require.Contains(t, body, `data-job="orphan" data-cause="unbound" class="missed"`)

			code, body = get(t, c, ts.URL+"/")
			require.Equal(t, http.StatusOK, code, body)
			n := len(h.Missed)
			require.Contains(t, body, fmt.Sprintf(`class="warn" title="ticks no replica started by their starting deadline, by fire time"><b>%d</b> missed ticks in the last hour: orphan %d</a>`, n, n))
			require.NotContains(t, body, secret)
		})
	}
}

// insertAttempts writes, through SQL on a real store's tables, three ticks
// of "report": one traced, one not, one whose trace id is not hex (and
// would be markup), and a missed tick whose detail is markup.
func insertAttempts(t *testing.T, db *sql.DB, postgres bool) {
	t.Helper()
	ctx := t.Context()
	_, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	ins := `INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, error, trace_id)
		VALUES ('default', 'report', ?1, ?2, 1, 'web-1', 'succeeded', ?1, ?1 + 5, NULL, nullif(?3, ''))`
	miss := `INSERT INTO aegis_schedule_run_missed (namespace, job, fire_ms, cause, detail, node, recorded_ms) VALUES ('default', 'report', ?1, 'store', ?2, 'web-2', ?1 + 20000)`
	if postgres {
		ins = `INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, error, trace_id)
		VALUES ('default', 'report', to_timestamp($1 / 1000.0), $2, 1, 'web-1', 'succeeded', to_timestamp($1 / 1000.0), to_timestamp($1 / 1000.0 + 0.005), NULL, nullif($3, ''))`
		miss = `INSERT INTO aegis_schedule_run_missed (namespace, job, fire_at, cause, detail, node, recorded_at) VALUES ('default', 'report', to_timestamp($1 / 1000.0), 'store', $2, 'web-2', to_timestamp($1 / 1000.0 + 20))`
	}
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for i, trace := range []string{traceID, "", `"><script>alert(1)</script>`} {
		_, err := db.ExecContext(ctx, ins, base.Add(time.Duration(i)*time.Minute).UnixMilli(), 10+i, trace)
		require.NoError(t, err)
	}
	_, err = db.ExecContext(ctx, miss, base.Add(3*time.Minute).UnixMilli(), `the store did not answer: <img src=x onerror=alert(1)>`)
	require.NoError(t, err)
}

const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// With --trace-url, an attempt with a trace id links to its trace; without
// it, the id is text; an id that is not hex is text either way, escaped,
// as is every other value of the store.
func TestTraceLinks(t *testing.T) {
	t.Parallel()
	for _, dbName := range []string{"postgres", "sqlite"} {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			var db *sql.DB
			if dbName == "postgres" {
				db = testenv.PostgresSQL(t)
			} else {
				var err error
				db, err = sqlitelease.Open(filepath.Join(t.TempDir(), "aegis.db"))
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
			}
			insertAttempts(t, db, dbName == "postgres")
			const markup = `&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;`

			plain := serve(t, &console.Config{DB: db})
			code, body := get(t, client(t), plain.URL+"/schedules/report")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `<td><code class="trace">`+traceID+`</code></td></tr>`)
			require.Contains(t, body, `<td class="error"></td><td></td></tr>`, "no trace id, nothing")
			require.Contains(t, body, `<code class="trace">`+markup+`</code>`)
			require.NotContains(t, body, "<script>")
			require.NotContains(t, body, "<img")
			require.Contains(t, body, `<td>the store did not answer: &lt;img src=x onerror=alert(1)&gt;</td>`)
			require.NotContains(t, body, "<a class=\"trace\"")

			linked := serve(t, &console.Config{DB: db, TraceURL: "https://traces.example/explore?trace={trace_id}&view=full"})
			code, body = get(t, client(t), linked.URL+"/schedules/report")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `<a class="trace" href="https://traces.example/explore?trace=`+traceID+`&amp;view=full" rel="noreferrer">`+traceID+`</a>`)
			require.Equal(t, 1, strings.Count(body, `<a class="trace"`), "one attempt has a hex trace id")
			require.Contains(t, body, `<code class="trace">`+markup+`</code>`, "not a link")
			require.NotContains(t, body, "<script>")
		})
	}
}

// Config.TraceURL must be an http(s) URL with the placeholder and no
// credentials; the error names the field, not the URL.
func TestTraceURLChecked(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresSQL(t)
	for _, tt := range []struct{ url, want string }{
		{"http://localhost:16686/trace/", "has no {trace_id}"},
		{"javascript:alert('{trace_id}')", "not an http or https URL"},
		{"/trace/{trace_id}", "not an http or https URL"},
		{"https://ops:hunter2@traces.example/{trace_id}", "carries a user or password"},
		{"http://[::1/{trace_id}", "does not parse"},
	} {
		_, err := console.New(t.Context(), &console.Config{DB: db, Addr: "127.0.0.1:0", TraceURL: tt.url})
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.url)
		require.ErrorContains(t, err, "Config.TraceURL", tt.url)
		require.ErrorContains(t, err, tt.want, tt.url)
		require.NotContains(t, err.Error(), "hunter2")
	}
	_, err := console.New(t.Context(), &console.Config{DB: db, Addr: "127.0.0.1:0", TraceURL: "http://localhost:16686/trace/{trace_id}"})
	require.NoError(t, err)
}

// A database whose run table predates the attempt history (its replicas
// run an older Aegis) says so, shows the run table's rows instead, and
// gets no table from the console.
func TestHistoryTablesMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // its run row: export, stuck, token 73
	_, err := f.db.Exec(`DROP TABLE aegis_schedule_run_attempt, aegis_schedule_run_missed`)
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)
	code, body := get(t, c, ts.URL+"/schedules/export")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `This database has no table <code>aegis_schedule_run_attempt</code>: its replicas run an Aegis from before`)
	require.Contains(t, body, `This database has no table <code>aegis_schedule_run_missed</code>`)
	require.Regexp(t, `(?s)The run table's latest row of each tick:.*data-job="export" data-state="running" data-token="73" class="stuck"`, body)
	code, body = get(t, c, ts.URL+"/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "missed ticks: not recorded in this database (no table <code>aegis_schedule_run_missed</code>)")
	for _, table := range []string{"aegis_schedule_run_attempt", "aegis_schedule_run_missed"} {
		var n int
		require.NoError(t, f.db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = $1`, table).Scan(&n))
		require.Zero(t, n, "the console created no %s", table)
	}
}
