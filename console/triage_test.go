package console_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/schedule"
)

// attrRE matches an element's attributes.
var attrRE = regexp.MustCompile(`([a-z][a-z-]*)="([^"]*)"`)

// card returns the attributes of the overview's card id, and its text
// without markup.
func card(t *testing.T, body, id string) (map[string]string, string) {
	t.Helper()
	m := regexp.MustCompile(`<a ([^>]*id="` + id + `"[^>]*)>(.*?)</a>`).FindStringSubmatch(body)
	require.NotNil(t, m, "the overview has #%s: %s", id, body)
	attrs := map[string]string{}
	for _, a := range attrRE.FindAllStringSubmatch(m[1], -1) {
		attrs[a[1]] = a[2]
	}
	return attrs, regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[2], "")
}

// attemptRows lists the rows of the page's table of class (the
// attempts' "attempts", the default list's "trouble", every one of that
// class) as job/outcome.
func attemptRows(body, class string) []string {
	var out []string
	for _, table := range regexp.MustCompile(`(?s)<table class="`+class+`">.*?</table>`).FindAllString(body, -1) {
		for _, m := range regexp.MustCompile(`<tr data-job="([^"]+)" data-state="([^"]+)"`).FindAllStringSubmatch(table, -1) {
			out = append(out, m[1]+"/"+m[2])
		}
	}
	return out
}

// catalogCell returns the cell of class of the catalog's row of name.
func catalogCell(t *testing.T, body, name, class string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-schedule="` + regexp.QuoteMeta(name) + `" [^>]*>.*?<td class="` + class + `">(.*?)</td>\n`).FindStringSubmatch(body)
	require.NotNil(t, m, "%s's %s: %s", name, class, body)
	return m[1]
}

// The overview's cards and /schedules answer "did anything run twice?"
// and "which schedule runs nowhere?" from what real schedulers left
// (historytest: nightly's tick ran twice, its holder refused by the
// fence; orphan's handler on no replica) and from live replicas, one with
// the catalog's "rebuild" handler and one without it, on PostgreSQL and
// on SQLite; then with historytest.Rows (a tick applied twice, a failure,
// a lease lost 2h ago). Each filter of the attempts lists what it says.
func TestTriage(t *testing.T) {
	t.Parallel()
	for _, dbName := range []string{"postgres", "sqlite"} {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			open := historytest.OpenPostgres(t)
			if dbName == "sqlite" {
				open = historytest.OpenSQLite(t, filepath.Join(t.TempDir(), "aegis.db"))
			}
			h := historytest.Make(t, open)
			db := open()
			cat, err := schedule.NewCatalog(ctx, db, nil)
			require.NoError(t, err)
			for _, e := range []schedule.Entry{
				{Name: "rebuild", Every: 24 * time.Hour, Handler: "rebuild"},
				{Name: "ledger", Every: 24 * time.Hour, Handler: "rebuild"},
				{Name: "sleepy", Every: 24 * time.Hour, Handler: "rebuild"},
			} {
				_, err = cat.Put(ctx, e)
				require.NoError(t, err)
			}
			_, err = cat.Pause(ctx, "sleepy")
			require.NoError(t, err)
			replicaOn(t, open(), "replica-a")
			replicaOn(t, open(), "replica-b", "other")
			require.Eventually(t, func() bool {
				e, err := cat.Get(ctx, "rebuild")
				return err == nil && strings.Join(e.Replicas, ",") == "replica-a" && strings.Join(e.MissingOn, ",") == "replica-b"
			}, 20*time.Second, 10*time.Millisecond, "both replicas' heartbeats")
			ts := serve(t, &console.Config{DB: db})
			c := client(t)
			page := func(path string) string {
				t.Helper()
				code, body := get(t, c, ts.URL+path)
				require.Equal(t, http.StatusOK, code, body)
				return body
			}

			// The overview before the rows that a fenced store never shows,
			// then every subtest with them.
			before := page("/")
			historytest.WriteAttempts(t, db, historytest.Now(t, db), historytest.Rows)

			t.Run("overview", func(t *testing.T) {
				body := before
				want := func(id, hour, day, warn, text string) {
					t.Helper()
					a, got := card(t, body, id)
					require.Equal(t, hour, a["data-hour"], id)
					require.Equal(t, day, a["data-day"], id)
					require.Equal(t, warn, a["class"], id)
					require.Contains(t, got, text, id)
				}
				want("card-lost", "0", "0", "", "0 attempts lost their lease in the last hour, 0 in 24 h")
				want("card-refused", "1", "1", "warn", "1 attempts refused by the fence in the last hour, 1 in 24 h")
				want("card-ran-twice", "1", "1", "warn", "1 ticks ran twice in the last hour, 1 in 24 h")
				want("card-applied-twice", "0", "0", "", "ticks applied twice in 24 h: none, the fence held")
				a, _ := card(t, body, "card-ran-twice")
				require.Equal(t, "/schedules?show=ran-twice&amp;since=24h#history", a["href"])
				a, text := card(t, body, "card-unbound")
				require.Equal(t, map[string]string{"href": "/schedules?handler=none", "id": "card-unbound", "data-count": "1", "class": "warn",
					"title": "no live replica has their handler: none runs them, and each of their ticks is missed"}, a, "orphan")
				require.Contains(t, text, "1 schedules no replica runs")
				a, _ = card(t, body, "card-some-lack")
				require.Equal(t, "3", a["data-count"], "rebuild, ledger and sleepy: replica-b lacks their handler")
				require.Empty(t, a["class"], "harmless: replica-a runs them")
				a, _ = card(t, body, "card-stuck-runs")
				require.Equal(t, "0", a["data-count"])

				body = page("/")
				want("card-lost", "0", "1", "warn", "0 attempts lost their lease in the last hour, 1 in 24 h")
				want("card-refused", "1", "1", "warn", "")
				want("card-ran-twice", "1", "2", "warn", "1 ticks ran twice in the last hour, 2 in 24 h")
				want("card-applied-twice", "1", "1", "warn", "1 ticks applied twice in the last hour, 1 in 24 h")
			})

			t.Run("catalog", func(t *testing.T) {
				body := page("/schedules")
				require.Equal(t, `<b class="warn">no replica has handler <code>absent</code></b> (live: replica-a, replica-b)`, catalogCell(t, body, "orphan", "handler-status"))
				require.Equal(t, `<b class="warn">none: no replica runs it</b>`, catalogCell(t, body, "orphan", "next-fire"), "no next fire for a schedule no replica runs")
				require.Equal(t, "none on record", catalogCell(t, body, "orphan", "last-success"))
				misses := regexp.MustCompile(`<a class="warn" href="/schedules/orphan#missed">(\d+)</a>`).FindStringSubmatch(catalogCell(t, body, "orphan", "num misses"))
				require.NotNil(t, misses, body)
				n, err := strconv.Atoi(misses[1])
				require.NoError(t, err)
				require.GreaterOrEqual(t, n, len(h.Missed), "at least the watcher's")
				require.Equal(t, `runs on replica-a; <span class="warn" title="these live replicas have no handler rebuild: the others run it">missing on replica-b</span>`, catalogCell(t, body, "rebuild", "handler-status"))
				require.Regexp(t, `^<span title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">in \d`, catalogCell(t, body, "rebuild", "next-fire"))
				require.Equal(t, `<b class="paused">none: paused</b>`, catalogCell(t, body, "sleepy", "next-fire"))
				require.Regexp(t, `^<span title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">(8m5\d|9m\d\d)s ago</span>$`, catalogCell(t, body, "ledger", "last-success"))
				require.Regexp(t, `^<span class="warn" title="\d{4}-[^"]+: disk full">(19m5\d|20m\d\d)s ago</span>$`, catalogCell(t, body, "ledger", "last-failure"), "the error on hover")
				require.Equal(t, "0", catalogCell(t, body, "ledger", "num misses"))

				body = page("/schedules?handler=none")
				require.Contains(t, body, `<p id="catalog-filter" data-count="1">1 schedules no live replica has a handler for`)
				require.Equal(t, []string{"orphan"}, catalogNames(body))
				body = page("/schedules?handler=some")
				require.Equal(t, []string{"ledger", "rebuild", "sleepy"}, catalogNames(body))
			})

			t.Run("filters", func(t *testing.T) {
				for _, tt := range []struct {
					query string
					want  []string
					says  string
				}{
					{"show=refused&since=24h", []string{"nightly/refused"}, "1 attempt refused by the fence of every schedule in the last 24h."},
					{"show=ran-twice&since=24h", []string{"report/succeeded", "report/lost", "nightly/succeeded", "nightly/refused"}, "4 attempts of the ticks that ran twice of every schedule in the last 24h."},
					{"show=ran-twice&since=1h", []string{"nightly/succeeded", "nightly/refused"}, ""},
					{"show=applied-twice&since=24h", []string{"ledger/succeeded", "ledger/succeeded"}, "2 attempts of the ticks applied twice"},
					{"show=lost&since=1h", nil, "0 attempts lost (their lease lost) of every schedule in the last 1h."},
					{"show=lost&since=24h", []string{"report/lost"}, ""},
					{"show=lost", []string{"report/lost"}, "on record"},
					{"job=ledger", []string{"ledger/succeeded", "ledger/succeeded", "ledger/failed"}, "3 attempts of ledger on record."},
					{"job=ledger&show=failed&since=7d", []string{"ledger/failed"}, "1 attempt failed of ledger in the last 7 days."},
					{"job=nightly&show=applied-twice", nil, "0 attempts of the ticks applied twice of nightly"},
				} {
					body := page("/schedules?" + tt.query)
					require.Equal(t, tt.want, attemptRows(body, "attempts"), tt.query)
					require.Contains(t, body, fmt.Sprintf(`<p id="shown" data-count="%d" data-shown="%d">`, len(tt.want), len(tt.want)), tt.query)
					require.Contains(t, body, tt.says, tt.query)
					if strings.Contains(tt.query, "show=") || strings.Contains(tt.query, "since=") {
						require.NotContains(t, body, `id="trouble"`, "%s: a page filtered by outcome or time is the list asked for", tt.query)
					}
				}
				for _, tt := range []struct{ query, want string }{
					{"show=ran+twice", `show="ran twice" is not an outcome: want one of running, succeeded`},
					{"since=2h", `since="2h" is not a window: want 1h, 24h or 7d`},
					{"handler=all", `handler="all": want none`},
					{"job=" + strings.Repeat("j", 300), "AttemptFilter.Job: aegis: invalid argument: key is 300 bytes"},
				} {
					code, body := get(t, c, ts.URL+"/schedules?"+tt.query)
					require.Equal(t, http.StatusBadRequest, code, tt.query)
					require.Contains(t, body, tt.want, tt.query)
				}
			})

			t.Run("prefix", func(t *testing.T) {
				pts := serve(t, &console.Config{DB: db, Prefix: "/ops/aegis"})
				for _, path := range []string{"/", "/schedules", "/schedules?handler=none", "/schedules?show=ran-twice&since=24h", "/schedules/nightly"} {
					code, body := get(t, c, pts.URL+"/ops/aegis"+path)
					require.Equal(t, http.StatusOK, code, body)
					links := regexp.MustCompile(`(?:href|action)="([^"]*)"`).FindAllStringSubmatch(body, -1)
					require.NotEmpty(t, links)
					for _, l := range links {
						require.True(t, strings.HasPrefix(l[1], "/ops/aegis/") || strings.HasPrefix(l[1], "#"), "%s links to %s", path, l[1])
					}
				}
			})

			t.Run("default list", func(t *testing.T) {
				body := page("/schedules")
				require.Equal(t, []string{"report/succeeded", "report/lost", "nightly/succeeded", "nightly/refused"}, attemptRows(body, "trouble")[:4],
					"the ticks that ran twice in the last day, above the full list")
				require.Regexp(t, `(?s)id="trouble".*id="applied-twice".*id="history"`, body)
				require.Equal(t, []string{"ledger/succeeded", "ledger/succeeded"}, attemptRows(body, "trouble")[4:])
				require.Contains(t, body, `<dl id="words">`)
				body = page("/schedules/nightly")
				require.Equal(t, []string{"nightly/succeeded", "nightly/refused"}, attemptRows(body, "trouble"))
			})
		})
	}
}

// catalogNames are the schedules of the catalog's rows, in order.
func catalogNames(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<tr data-schedule="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}
