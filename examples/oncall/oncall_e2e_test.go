package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// shotsEnv, when set to 1, makes TestOnCallConsole write the console's
// screenshots over the demo into docs/ (make console-shots).
const shotsEnv = "AEGIS_CONSOLE_SHOTS"

// maxClicks is how many clicks from the overview an answer may take.
const maxClicks = 2

// The demo's names.
const (
	leaseKey      = "invoice/2026-12"
	leaseResource = "ledger/2026-12"
	staleHolder   = "worker-7" // paused past its TTL, then refused
	newHolder     = "worker-8" // takes the key meanwhile
	workQueue     = "oncall"
)

// Issue 33's first "done when": the real demo (three examples/catalog
// replicas, a lease holder and a queue worker, real processes on
// PostgreSQL, each paused with SIGSTOP where the story needs it), then
// Chromium on the console over its database answers the on-call
// engineer's five questions from the overview, each in at most two
// clicks, read from the page: run twice? refused, and whose? who holds
// the key? which missed and why? which queue jobs are stuck or overdue?
// Each question is a subtest, so that a missing answer names itself and
// the others are still asked.
func TestOnCallConsole(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 1, "the on-call demo's five processes, then a browser")
	url := testenv.PostgresURL(t)
	bin := buildDemo(t)
	d := runDemo(t, url, bin)

	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	at := serveConsole(t, db)
	page := chromium.Open(t, 3*time.Minute)

	ask := func(name string, f func(a *asker)) {
		t.Run(name, func(t *testing.T) {
			a := &asker{t: t, ctx: page.Ctx, base: at}
			a.overview()
			f(a)
			t.Logf("%d clicks from the overview", a.clicks)
		})
	}
	ask("RanTwice", func(a *asker) {
		for id, want := range map[string]string{"#card-ran-twice": "1", "#card-refused": "1", "#card-applied-twice": "0"} {
			c := a.need(id)
			require.Equal(a.t, want, c.Attrs["data-hour"], "%s's count of the last hour", id)
			require.Equal(a.t, want, c.Attrs["data-day"], "%s's count of the last day", id)
		}
		a.click("#card-ran-twice")
		require.Contains(a.t, a.location(), "show=ran-twice", "the card links to the attempts filtered")
		rows := a.all(`table.attempts tbody tr[data-attempt]`)
		require.Len(a.t, rows, 2, "the attempts of the one tick that ran twice, and no other: %v", rows)
		for _, r := range rows {
			require.Equal(a.t, "nightly", r.Attrs["data-job"])
			at := d.first
			if r.Attrs["data-attempt"] == "2" {
				at = d.second
			}
			require.Equal(a.t, at.Outcome, r.Attrs["data-state"], "attempt %d", at.Attempt)
			require.Equal(a.t, fmt.Sprint(at.Token), r.Attrs["data-token"], "attempt %d", at.Attempt)
			require.Contains(a.t, r.Text, at.Node, "attempt %d's node", at.Attempt)
		}
	})
	ask("RefusedAndWhose", func(a *asker) {
		c := a.need("#card-fence-refusals")
		require.NotContains(a.t, []string{"", "0"}, c.Attrs["data-day"], "refusals of the last day")
		w := a.need("#card-fence-refusals .writer")
		require.Contains(a.t, w.Text, staleHolder, "the last refused writer")
		require.Regexp(a.t, fmt.Sprintf(`(^|\D)%d(\D|$)`, d.staleToken), w.Text, "its token")
		a.click("#card-fence-refusals")
		row := fmt.Sprintf(`table#refusals tbody tr[data-resource=%q][data-token="%d"][data-held="%d"]`, leaseResource, d.staleToken, d.newToken)
		a.need(row)
		require.Contains(a.t, a.need(row+" td.writer").Text, staleHolder, "the refused writer's holder label")
		require.Contains(a.t, a.need(row + " a.lease").Attrs["href"], "/leases/", "the refusal links to its lease key")
	})
	ask("WhoHoldsTheKey", func(a *asker) {
		a.click("#card-leases")
		row := fmt.Sprintf(`tr[data-key=%q]`, leaseKey)
		require.Equal(a.t, newHolder, a.need(row+" .holder").Text)
		require.Equal(a.t, fmt.Sprint(d.newToken), a.need(row+" .token").Text)
		since := a.need(row + " td[title]")
		require.Regexp(a.t, `ago$`, since.Text, "since when, in words")
		require.Regexp(a.t, `^\d{4}-\d\d-\d\d`, since.Attrs["title"], "the absolute time on hover")
	})
	ask("MissedAndWhy", func(a *asker) {
		require.Contains(a.t, a.need("#missed-hour").Text, "orphan")
		a.click("#missed-hour")
		a.need(`table.missed tr[data-job="orphan"][data-cause="unbound"]`)
	})
	ask("Unbound", func(a *asker) {
		require.Equal(a.t, "1", a.need("#card-unbound").Attrs["data-count"], "schedules whose handler no replica has")
		require.Equal(a.t, "2", a.need("#card-some-lack").Attrs["data-count"], "schedules some replicas lack: nightly (replica-c), heartbeat (replica-a, -b)")
		a.click("#card-unbound")
		require.Empty(a.t, a.all(`tr[data-schedule="nightly"], tr[data-schedule="heartbeat"]`), "the filter leaves out the schedules a replica runs")
		row := `tr[data-schedule="orphan"]`
		require.NotEmpty(a.t, a.need(row+" td.handler-status").Text)
		require.NotRegexp(a.t, `^in `, a.need(row+" td.next-fire").Text, "no next fire for a schedule no replica runs")
	})
	ask("QueueStuck", func(a *asker) {
		require.Equal(a.t, "1", a.need("#card-queue-stuck").Attrs["data-count"])
		a.click("#card-queue-stuck")
		require.Contains(a.t, a.need(fmt.Sprintf(`tr[data-job="%d"][data-state]`, d.stuckJob)).Text, "stuck")
	})
	ask("QueueOverdue", func(a *asker) {
		require.Equal(a.t, "2", a.need("#card-queue-overdue").Attrs["data-count"])
		a.click("#card-queue-overdue")
		for _, id := range d.overdueJobs {
			// Due 12 minutes before the demo began: more by the time the page is read
			// (a wait for a browser slot on a loaded machine).
			require.Regexp(a.t, `\b1[2-9]m\d\ds\b`, a.need(fmt.Sprintf(`tr[data-job="%d"][data-state]`, id)).Text, "job %d: how long past due, in words", id)
		}
	})
	ask("QueueDead", func(a *asker) {
		require.Equal(a.t, "2", a.need("#card-queue-dead").Attrs["data-count"], "a discarded and a cancelled job")
		a.click("#card-queue-dead")
		for _, id := range d.deadJobs {
			a.need(fmt.Sprintf(`tr[data-job="%d"]`, id))
		}
	})

	if os.Getenv(shotsEnv) == "1" {
		page.Do("open the overview", chromedp.Navigate(at+"/"), chromedp.WaitVisible(chromedp.CSS(`.cards`)))
		page.Screenshot("../../docs/console-overview.png")
		page.Do("open nightly", chromedp.Navigate(at+"/schedules/nightly"), chromedp.WaitVisible(chromedp.CSS(`#history`)))
		page.Screenshot("../../docs/console-schedule.png")
	}
	require.Empty(t, page.Exceptions())
}

// The refusal /fence shows is the fence's own record: the program counts
// none itself (issue 33's second "done when"), which this test holds it to.
func TestOnCallCountsNoRefusal(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	require.NoError(t, err)
	var calls []string
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(s.Sel.Name, "CountRefusal") {
				calls = append(calls, s.Sel.Name)
			}
		}
		return true
	})
	require.Empty(t, calls)
}

// asker asks one question in the browser, counting its clicks from the
// overview.
type asker struct {
	t      *testing.T
	ctx    context.Context
	base   string
	clicks int
}

// step bounds one browser step: a missing element fails its question, not
// the budget of the others.
const step = 20 * time.Second

func (a *asker) overview() {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(a.ctx, step)
	defer cancel()
	require.NoError(a.t, chromedp.Do(ctx, chromedp.Navigate(a.base+"/"), chromedp.WaitVisible(chromedp.CSS(`.cards`))), "open the overview")
}

// elem is an element of the page: its text and attributes.
type elem struct {
	Text  string
	Attrs map[string]string
}

// all returns the elements sel matches.
func (a *asker) all(sel string) []elem {
	a.t.Helper()
	q, err := json.Marshal(sel)
	require.NoError(a.t, err)
	ctx, cancel := context.WithTimeout(a.ctx, step)
	defer cancel()
	es, err := chromedp.Run(ctx, chromedp.Evaluate[[]elem](`[...document.querySelectorAll(`+string(q)+`)].map(e => ({Text: e.innerText.trim(), Attrs: Object.fromEntries([...e.attributes].map(x => [x.name, x.value]))}))`))
	require.NoError(a.t, err, "read %s", sel)
	return es
}

// need returns the first element sel matches, and fails the question
// when there is none.
func (a *asker) need(sel string) elem {
	a.t.Helper()
	es := a.all(sel)
	require.NotEmpty(a.t, es, "%s: no such element on %s; the page:\n%s", sel, a.location(), a.text())
	return es[0]
}

func (a *asker) location() string {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(a.ctx, step)
	defer cancel()
	l, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(a.t, err)
	return l
}

func (a *asker) text() string {
	ctx, cancel := context.WithTimeout(a.ctx, step)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	return s
}

// click clicks the link sel, waits for the page it leads to, and counts
// the click: more than maxClicks fail the question.
func (a *asker) click(sel string) {
	a.t.Helper()
	href := a.need(sel).Attrs["href"]
	require.NotEmpty(a.t, href, "%s is not a link", sel)
	from := a.location()
	ctx, cancel := context.WithTimeout(a.ctx, step)
	defer cancel()
	require.NoError(a.t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))), "click %s", sel)
	a.clicks++
	require.LessOrEqual(a.t, a.clicks, maxClicks, "clicks from the overview")
	require.Eventually(a.t, func() bool {
		l, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState === "complete" ? location.href : ""`))
		return err == nil && l != "" && l != from
	}, step, 20*time.Millisecond, "the page %s links to (%s) did not load", sel, href)
}

// demo is what the demo did, as its processes and the store tell it.
type demo struct {
	first, second         schedule.Attempt // nightly's tick's attempts: refused, succeeded
	staleToken, newToken  int64            // the lease tokens of worker-7 and worker-8
	stuckJob              int64
	overdueJobs, deadJobs []int64
}

// runDemo runs the on-call story on url's database: each part waits on
// the events its processes print or on the store, never on time.
func runDemo(t *testing.T, url, bin string) demo {
	t.Helper()
	ctx := t.Context()
	var d demo
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// The catalog: nightly works 5s under a 2s lease, and runs once a day
	// at a time the test does not reach, so its one tick is the Run now
	// below; orphan's handler no replica has; heartbeat's attempts, every
	// 2s, bury nightly's in the unfiltered history. replica-a and -b have
	// nightly's handler, replica-c heartbeat's alone: the replica paused in
	// nightly's run is running nothing else, so no other tick runs twice.
	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "nightly", Cron: fmt.Sprintf("0 0 %d * * *", (time.Now().UTC().Hour()+12)%24),
		Handler: "report", Args: json.RawMessage(`{"work":"5s"}`), LockAtMostFor: 2 * time.Second})
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "orphan", Every: 2 * time.Second, Handler: "nobody"})
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "heartbeat", Every: 2 * time.Second, Handler: "echo"})
	require.NoError(t, err)
	replicas := &output{}
	handlers := map[string]string{"replica-a": "report", "replica-b": "report", "replica-c": "echo"}
	byNode := map[string]*proc{}
	for n, h := range handlers {
		byNode[n] = start(t, replicas, filepath.Join(bin, "catalog"), "-store", url, "-node", n, "-handlers", h)
	}
	type catalogEvent struct{ Node, Kind, Job, Error string }
	var cur cursor
	bound := map[string]bool{}
	for len(bound) < len(byNode) {
		e := next(t, replicas, &cur, time.Minute, "every replica to bind its schedule", func(e catalogEvent) bool {
			return e.Kind == "bound" && (e.Job == "nightly" || e.Job == "heartbeat") || e.Kind == "error"
		})
		require.NotEqual(t, "error", e.Kind, "%s: %s", e.Node, e.Error)
		bound[e.Node] = true
	}

	// Ran twice, applied once: the replica that runs nightly's tick is
	// stopped past its lease; another reclaims the tick and finishes it;
	// the first, resumed, is refused.
	_, err = cat.RunNow(ctx, "nightly")
	require.NoError(t, err)
	runner := next(t, replicas, &cur, time.Minute, "a replica to run nightly", func(e catalogEvent) bool { return e.Kind == "run" && e.Job == "nightly" })
	byNode[runner.Node].signal(t, syscall.SIGSTOP)
	runs, err := schedule.NewRunReader(ctx, db, nil)
	require.NoError(t, err)
	var attempts []schedule.Attempt
	eventually(t, time.Minute, "another replica to take nightly's tick over and finish it", func() bool {
		attempts, err = runs.Attempts(ctx, "nightly", 10)
		require.NoError(t, err)
		return len(attempts) == 2 && attempts[0].Attempt == 2 && attempts[0].Outcome == "succeeded"
	}, func() string { return fmt.Sprintf("%+v", attempts) })
	require.Equal(t, 1, attempts[1].Attempt)
	require.Equal(t, "lost", attempts[1].Outcome, "the paused attempt, taken over (not succeeded: it ended before the test stopped it)")
	byNode[runner.Node].signal(t, syscall.SIGCONT)
	eventually(t, time.Minute, "the resumed attempt's end", func() bool {
		attempts, err = runs.Attempts(ctx, "nightly", 10)
		require.NoError(t, err)
		return len(attempts) == 2 && attempts[1].Outcome != "lost"
	}, func() string { return fmt.Sprintf("%+v", attempts) })
	d.second, d.first = attempts[0], attempts[1]
	require.Equal(t, runner.Node, d.first.Node)
	require.Equal(t, "refused", d.first.Outcome, "the resumed attempt's outcome: %+v", d.first)
	require.NotEqual(t, d.first.Node, d.second.Node)
	require.Greater(t, d.second.Token, d.first.Token)
	var applied int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM catalog_report WHERE name = 'nightly'`).Scan(&applied))
	require.Equal(t, 1, applied, "the tick ran twice and was applied once")
	eventually(t, time.Minute, "heartbeat's attempts", func() bool {
		as, err := runs.Attempts(ctx, "heartbeat", 3)
		require.NoError(t, err)
		return len(as) == 3
	}, func() string { return "" })
	eventually(t, time.Minute, "a missed tick of orphan, unbound", func() bool {
		m, err := runs.Missed(ctx, "orphan", 1)
		require.NoError(t, err)
		return len(m) == 1 && m[0].Cause == "unbound"
	}, func() string { return "" })

	// Refused by the fence, and whose: worker-7 holds the key and writes,
	// is stopped past its TTL, worker-8 takes the key and writes, and
	// worker-7, resumed, writes with its token: refused.
	type leaseEvent struct {
		Event, Holder, Error string
		Token, Held          int64
	}
	stale := &output{}
	p7 := start(t, stale, filepath.Join(bin, "oncall"), "-store", url, "-mode", "lease", "-holder", staleHolder, "-key", leaseKey, "-resource", leaseResource, "-ttl", "2s", "-every", "200ms")
	var c7 cursor
	held := next(t, stale, &c7, time.Minute, staleHolder+" to hold the key", func(e leaseEvent) bool { return e.Event == "held" })
	next(t, stale, &c7, time.Minute, staleHolder+" to write", func(e leaseEvent) bool { return e.Event == "wrote" })
	p7.signal(t, syscall.SIGSTOP)
	taker := &output{}
	start(t, taker, filepath.Join(bin, "oncall"), "-store", url, "-mode", "lease", "-holder", newHolder, "-key", leaseKey, "-resource", leaseResource, "-ttl", "30s", "-every", "200ms")
	var c8 cursor
	took := next(t, taker, &c8, time.Minute, newHolder+" to take the key", func(e leaseEvent) bool { return e.Event == "held" })
	next(t, taker, &c8, time.Minute, newHolder+" to write", func(e leaseEvent) bool { return e.Event == "wrote" })
	p7.signal(t, syscall.SIGCONT)
	refused := next(t, stale, &c7, time.Minute, staleHolder+"'s write to be refused", func(e leaseEvent) bool { return e.Event == "refused" })
	require.Equal(t, held.Token, refused.Token)
	require.Equal(t, took.Token, refused.Held)
	require.Greater(t, took.Token, held.Token)
	d.staleToken, d.newToken = held.Token, took.Token

	// The queue: a job that fails once (discarded), a job the worker is
	// frozen in (stuck past its lease), two jobs due 12 minutes ago that
	// no worker takes, one cancelled.
	type queueEvent struct {
		Mode, Event string
		Job, Token  int64
	}
	work := &output{}
	w := start(t, work, filepath.Join(bin, "oncall"), "-store", url, "-mode", "worker", "-queue", workQueue, "-id", "worker-q/1", "-lease", "1s")
	var cw cursor
	next(t, work, &cw, time.Minute, "the queue worker to start", func(e queueEvent) bool { return e.Event == "ready" })
	enqueue := func(args ...string) int64 {
		t.Helper()
		o := &output{}
		p := start(t, o, filepath.Join(bin, "oncall"), append([]string{"-store", url, "-mode", "enqueue", "-queue", workQueue}, args...)...)
		var c cursor
		e := next(t, o, &c, time.Minute, "the job enqueued", func(e queueEvent) bool { return e.Event == "enqueued" })
		p.wait(t)
		return e.Job
	}
	qc, err := queue.New(pool, nil)
	require.NoError(t, err)
	state := func(id int64) queue.State {
		j, err := qc.Job(ctx, id)
		require.NoError(t, err)
		return j.State
	}
	failed := enqueue("-kind", "fail", "-max-attempts", "1")
	eventually(t, time.Minute, "the failing job to be discarded", func() bool { return state(failed) == queue.StateDiscarded },
		func() string { return string(state(failed)) })
	d.stuckJob = enqueue("-kind", "work", "-work", "1h")
	next(t, work, &cw, time.Minute, "the worker to work the job", func(e queueEvent) bool { return e.Event == "working" && e.Job == d.stuckJob })
	w.signal(t, syscall.SIGSTOP)
	for range 2 {
		d.overdueJobs = append(d.overdueJobs, enqueue("-kind", "work", "-due-ago", "12m"))
	}
	cancelled := enqueue("-kind", "work")
	require.NoError(t, qc.CancelJob(ctx, cancelled, "not needed: the report went out by hand"))
	d.deadJobs = []int64{failed, cancelled}
	eventually(t, time.Minute, "the frozen worker's job to run past its lease", func() bool {
		var stuck bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT state = 'running' AND locked_until < now() FROM aegis_job WHERE id = $1`, d.stuckJob).Scan(&stuck))
		return stuck
	}, func() string { return string(state(d.stuckJob)) })
	for _, id := range d.overdueJobs {
		require.Equal(t, queue.StateAvailable, state(id), "job %d: no worker took it", id)
	}
	require.Equal(t, queue.StateCancelled, state(cancelled))
	return d
}

// buildDemo builds examples/catalog and examples/oncall into a
// directory of the test's, which it returns.
func buildDemo(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the demo's programs")
	dir := t.TempDir()
	out, err := exec.CommandContext(t.Context(), gobin, "build", "-o", dir+"/", "../catalog", ".").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	return dir
}

// serveConsole serves the console's handler over db on a loopback
// listener until the test ends, and returns its URL.
func serveConsole(t *testing.T, db *sql.DB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := console.New(t.Context(), &console.Config{DB: db, Addr: ln.Addr().String()})
	require.NoError(t, err)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, hs.Close())
		testenv.Recv(t, served, 10*time.Second, "the console's server to stop")
	})
	return "http://" + ln.Addr().String()
}

// output is the JSON lines printed by one or more processes, kept whole so
// that a process never blocks on its stdout while the test waits on
// something else.
type output struct {
	mu    sync.Mutex
	lines [][]byte
	more  chan struct{} // closed at the next line
}

func (o *output) add(b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, b)
	if o.more != nil {
		close(o.more)
		o.more = nil
	}
}

// from returns the lines from i on, and a channel closed at the next one.
func (o *output) from(i int) ([][]byte, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.more == nil {
		o.more = make(chan struct{})
	}
	return o.lines[i:], o.more
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b strings.Builder
	for _, l := range o.lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// cursor is how far a waiter has read an output.
type cursor struct{ n int }

// next returns the first line from c on that decodes as T and matches,
// waiting at most d; the test fails with what it waited for and the
// output.
func next[T any](t *testing.T, o *output, c *cursor, d time.Duration, what string, match func(T) bool) T {
	t.Helper()
	deadline := time.After(d)
	for {
		lines, more := o.from(c.n)
		for _, l := range lines {
			c.n++
			var v T
			if json.Unmarshal(l, &v) == nil && match(v) {
				return v
			}
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("waited %s for %s; the output:\n%s", d, what, o)
		}
	}
}

// eventually waits at most d for cond, polling; the test fails with what
// it waited for and state's account of where things stood.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.After(d)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatalf("waited %s for %s; %s", d, what, state())
		}
	}
}

// proc is a process of the demo.
type proc struct {
	cmd    *exec.Cmd
	stderr testenv.Buffer
	exited chan struct{}
	err    error
}

// start starts bin with args, its JSON lines into o, until the test ends
// (SIGCONT, then SIGTERM; SIGKILL after 10s).
func start(t *testing.T, o *output, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives a crashed test
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			o.add(append([]byte(nil), sc.Bytes()...))
		}
	}()
	go func() {
		<-read // Wait closes the pipe: read it to its end first
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				t.Errorf("%s did not end within 20s of SIGKILL", filepath.Base(p.cmd.Path))
			}
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "%s: %v", filepath.Base(p.cmd.Path), sig)
}

// wait waits for a process that ends by itself, and fails the test when
// it failed.
func (p *proc) wait(t *testing.T) {
	t.Helper()
	testenv.Recv(t, p.exited, time.Minute, filepath.Base(p.cmd.Path)+" to exit")
	require.NoError(t, p.err, "%s %s; stderr:\n%s", filepath.Base(p.cmd.Path), strings.Join(redact(p.cmd.Args[1:]), " "), p.stderr.String())
}

// redact hides the store's URL in a command line the test prints.
func redact(args []string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if strings.HasPrefix(a, "postgres://") || strings.HasPrefix(a, "postgresql://") {
			out[i] = "<store>"
		}
	}
	return out
}
