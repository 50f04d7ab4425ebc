package console_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/queue"
)

type mailArgs struct {
	To string `json:"to"`
}

func (mailArgs) Kind() string { return "email" }

// flakyArgs fail until the test heals them.
type flakyArgs struct {
	To string `json:"to"`
}

func (flakyArgs) Kind() string { return "flaky" }

// queueFixture is a PostgreSQL schema with the queue's tables, the
// console's handle on it, and an administration client (never started)
// for the test's own checks.
type queueFixture struct {
	url   string
	db    *sql.DB
	pool  *pgxpool.Pool
	admin *queue.Client
	heal  atomic.Bool // flaky jobs succeed from now on
}

func newQueueFixture(t testing.TB) *queueFixture {
	t.Helper()
	// A password in the URL (the test server trusts loopback and ignores
	// it) is what no page may show.
	u, err := url.Parse(testenv.PostgresURL(t))
	require.NoError(t, err)
	if _, ok := u.User.Password(); !ok && u.User != nil {
		u.User = url.UserPassword(u.User.Username(), "pw-console-queue-test")
	}
	f := &queueFixture{url: u.String()}
	f.pool, err = pgxpool.New(t.Context(), f.url)
	require.NoError(t, err)
	t.Cleanup(f.pool.Close)
	f.db = stdlib.OpenDBFromPool(f.pool)
	t.Cleanup(func() { f.db.Close() })
	require.NoError(t, queue.Migrate(t.Context(), f.pool))
	f.admin, err = queue.New(f.pool, &queue.Config{Logger: quietLog()})
	require.NoError(t, err)
	return f
}

// worker starts a client working queue "mail" (email jobs complete, flaky
// ones fail until healed), stopped when the test ends.
func (f *queueFixture) worker(t *testing.T, cfg queue.Config) *queue.Client {
	t.Helper()
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[mailArgs](func(context.Context, *queue.Job[mailArgs]) error { return nil }))
	queue.AddWorker(ws, queue.WorkFunc[flakyArgs](func(context.Context, *queue.Job[flakyArgs]) error {
		if f.heal.Load() {
			return nil
		}
		return errors.New("smtp: 550 mailbox unavailable <b>for now</b>")
	}))
	cfg.Queues = map[string]queue.QueueConfig{"mail": {MaxWorkers: 2}}
	cfg.Workers = ws
	cfg.CompletedRetention = time.Hour
	cfg.ReapInterval = 50 * time.Millisecond
	cfg.Logger = quietLog()
	c, err := queue.New(f.pool, &cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	return c
}

func (f *queueFixture) enqueue(t testing.TB, args queue.Args, opts *queue.EnqueueOpts) int64 {
	t.Helper()
	res, err := f.admin.Enqueue(t.Context(), args, opts)
	require.NoError(t, err)
	return res.Job.ID
}

func (f *queueFixture) state(t *testing.T, id int64) queue.State {
	t.Helper()
	j, err := f.admin.Job(t.Context(), id)
	require.NoError(t, err)
	return j.State
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// cell is the count a queue's line shows for a state.
func cell(t *testing.T, body, q, state string) string {
	t.Helper()
	line := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(q) + `".*?</tr>`).FindString(body)
	require.NotEmpty(t, line, "no line for queue %s: %s", q, body)
	m := regexp.MustCompile(`<td class="num" data-state="` + state + `"><a [^>]*>(\d+)</a>`).FindStringSubmatch(line)
	require.NotNil(t, m, "no %s cell for queue %s: %s", state, q, line)
	return m[1]
}

// The queue page counts what was enqueued and worked, by queue and
// state, with the last hour's completions and waits, the stuck jobs and
// the dead letters; no DSN or password reaches it.
func TestQueuePageCounts(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	ctx := t.Context()
	w := f.worker(t, queue.Config{RetryBackoff: func(int) time.Duration { return time.Hour }})
	var done []int64
	for i := range 3 {
		done = append(done, f.enqueue(t, mailArgs{To: fmt.Sprintf("a%d@example.com", i)}, &queue.EnqueueOpts{Queue: "mail"}))
	}
	discarded := f.enqueue(t, flakyArgs{To: "b@example.com"}, &queue.EnqueueOpts{Queue: "mail", MaxAttempts: 1})
	retrying := f.enqueue(t, flakyArgs{To: "c@example.com"}, &queue.EnqueueOpts{Queue: "mail", MaxAttempts: 3})
	require.Eventually(t, func() bool {
		return f.state(t, done[0]) == queue.StateCompleted && f.state(t, done[1]) == queue.StateCompleted &&
			f.state(t, done[2]) == queue.StateCompleted && f.state(t, discarded) == queue.StateDiscarded &&
			f.state(t, retrying) == queue.StateScheduled
	}, 20*time.Second, 10*time.Millisecond, "the mail queue's jobs worked")
	// No reaper from here on: the stuck job below stays stuck.
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx))

	f.enqueue(t, mailArgs{To: "r1@example.com"}, &queue.EnqueueOpts{Queue: "reports"})
	f.enqueue(t, mailArgs{To: "r2@example.com"}, &queue.EnqueueOpts{Queue: "reports"})
	f.enqueue(t, mailArgs{To: "r3@example.com"}, &queue.EnqueueOpts{Queue: "reports", Delay: time.Hour})
	cancelled := f.enqueue(t, mailArgs{To: "r4@example.com"}, &queue.EnqueueOpts{Queue: "reports"})
	require.NoError(t, f.admin.CancelJob(ctx, cancelled, "not wanted"))
	// What a worker that paused mid-job leaves: running, its lease over,
	// started a minute after it was due.
	stuck := f.enqueue(t, mailArgs{To: "r5@example.com"}, &queue.EnqueueOpts{Queue: "reports"})
	_, err := f.pool.Exec(ctx, `UPDATE aegis_job SET state = 'running', token = token + 1, attempt = 1, locked_by = 'web-2/4242/ab',
		run_at = now() - interval '3 minutes', attempted_at = now() - interval '2 minutes', locked_until = now() - interval '1 minute' WHERE id = $1`, stuck)
	require.NoError(t, err)
	require.NoError(t, f.admin.Pause(ctx, "reports"))

	ts := serve(t, &console.Config{DB: f.db})
	code, body := get(t, client(t), ts.URL+"/queue")
	require.Equal(t, http.StatusOK, code, body)
	for state, want := range map[string]string{"available": "0", "scheduled": "1", "running": "0", "completed": "3", "cancelled": "0", "discarded": "1"} {
		require.Equal(t, want, cell(t, body, "mail", state), "mail, %s", state)
	}
	for state, want := range map[string]string{"available": "2", "scheduled": "1", "running": "1", "completed": "0", "cancelled": "1", "discarded": "0"} {
		require.Equal(t, want, cell(t, body, "reports", state), "reports, %s", state)
	}
	require.Contains(t, body, `<tr data-queue="mail" data-paused="false">`)
	require.Contains(t, body, `<tr data-queue="reports" data-paused="true">`)
	require.Contains(t, body, `data-retrying="1">(1 retrying)`)
	require.Contains(t, body, `data-stuck="1">(1 stuck)`)
	require.Regexp(t, `(?s)data-queue="mail".*?data-completed-hour="3">3</td><td class="num">0.05</td><td><svg class="spark".*?</svg></td><td class="num warn">1</td>\s*<td class="num" data-waits="4">`, body,
		"3 completions and a discard in the hour; 4 starts measured")
	mail := regexp.MustCompile(`(?s)<tr data-queue="mail".*?</tr>`).FindString(body)
	sum := 0
	for _, m := range regexp.MustCompile(`data-n="(\d+)"`).FindAllStringSubmatch(mail, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		sum += n
	}
	require.Equal(t, 3, sum, "the minutes of the chart add up to the hour's completions")
	require.Equal(t, 60, strings.Count(mail, "<rect x="), "a bar a minute")
	require.NotContains(t, regexp.MustCompile(`(?s)<tr data-queue="reports".*?</tr>`).FindString(body), "<svg", "no chart without completions")
	require.Regexp(t, `(?s)data-queue="reports".*?data-waits="1">1m00s</td>`, body, "the stuck job waited a minute after it was due")
	require.NotContains(t, body, `id="no-completed"`, "completed jobs are kept here")
	require.Regexp(t, fmt.Sprintf(`(?s)id="stuck".*<tr data-job="%d" data-state="running" data-token="1">.*web-2/4242/ab.*id="dead-letters"`, stuck), body)
	require.Regexp(t, fmt.Sprintf(`(?s)id="dead-letters".*data-job="%d" data-state="cancelled".*not wanted.*data-job="%d" data-state="discarded".*smtp: 550 mailbox unavailable &lt;b&gt;for now&lt;/b&gt;`, cancelled, discarded), body,
		"the dead letters, the latest first, their errors escaped")
	require.Contains(t, body, fmt.Sprintf(`href="/queue/jobs/%d/retry"`, discarded))
	noSecret(t, body, f.url)

	code, body = get(t, client(t), ts.URL+"/queue/jobs?queue=reports&state=available")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 2, strings.Count(body, `data-state="available"`), body)
	code, body = get(t, client(t), ts.URL+"/queue/jobs?queue=reports&state=bogus")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `state "bogus" is not a state of a job`)
	code, _ = get(t, client(t), ts.URL+"/queue/jobs?state=available")
	require.Equal(t, http.StatusBadRequest, code)
}

// noSecret checks that neither the store's URL nor its password is in body.
func noSecret(t *testing.T, body, storeURL string) {
	t.Helper()
	require.NotContains(t, body, storeURL)
	u, err := url.Parse(storeURL)
	require.NoError(t, err)
	if p, ok := u.User.Password(); ok && p != "" {
		require.NotContains(t, body, p, "the store's password")
	}
}

// A job that failed to the dead letters shows each attempt with its token
// and error; retried through the confirmation it is available again (its
// queue paused, nobody takes it yet), and a worker then completes it.
func TestQueueRetryDeadJob(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	ctx := t.Context()
	f.worker(t, queue.Config{RetryBackoff: func(int) time.Duration { return 10 * time.Millisecond }})
	id := f.enqueue(t, flakyArgs{To: "d@example.com"}, &queue.EnqueueOpts{Queue: "mail", MaxAttempts: 3})
	require.Eventually(t, func() bool { return f.state(t, id) == queue.StateDiscarded }, 20*time.Second, 10*time.Millisecond, "three failed attempts")
	dead, err := f.admin.Job(ctx, id)
	require.NoError(t, err)
	require.Len(t, dead.Errors, 3)

	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)
	code, body := get(t, c, fmt.Sprintf("%s/queue/jobs/%d", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, fmt.Sprintf(`data-job="%d" data-state="discarded" data-token="%d" data-attempt="3"`, id, dead.Token))
	for i, e := range dead.Errors {
		require.Equal(t, i+1, e.Attempt)
		if i > 0 {
			require.Greater(t, e.Token, dead.Errors[i-1].Token, "each attempt a greater token")
		}
		require.Regexp(t, fmt.Sprintf(`<tr data-attempt="%d" data-token="%d"><td class="num">%d</td><td class="num token">%d</td><td title="[^"]+">[^<]+ ago</td><td class="error">smtp: 550 mailbox unavailable &lt;b&gt;for now&lt;/b&gt;</td>`,
			e.Attempt, e.Token, e.Attempt, e.Token), body)
	}
	require.Contains(t, body, `&#34;to&#34;: &#34;d@example.com&#34;`, "the args, indented and escaped")
	require.Contains(t, body, fmt.Sprintf(`href="/queue/jobs/%d/retry"`, id))
	require.Contains(t, body, fmt.Sprintf(`href="/queue/jobs/%d/discard"`, id))
	require.NotContains(t, body, fmt.Sprintf(`href="/queue/jobs/%d/cancel"`, id), "a dead letter is not cancelled")

	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d/retry", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "available at once, with a fresh count of attempts and a greater token")
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "the confirmation has a CSRF field: %s", body)
	u := fmt.Sprintf("%s/queue/jobs/%d/retry", ts.URL, id)
	code, _, _ = post(t, c, u, url.Values{}, nil)
	require.Equal(t, http.StatusForbidden, code, "no CSRF field")
	code, _, _ = post(t, c, u, url.Values{"csrf": {m[1]}}, http.Header{"Origin": {"https://evil.example"}})
	require.Equal(t, http.StatusForbidden, code, "another origin")
	require.Equal(t, queue.StateDiscarded, f.state(t, id), "no refused request retried it")

	require.NoError(t, f.admin.Pause(ctx, "mail"))
	f.heal.Store(true)
	code, _, resp := post(t, c, u, url.Values{"csrf": {m[1]}}, http.Header{"Origin": {ts.URL}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, fmt.Sprintf("/queue/jobs/%d?done=retried", id), resp.Header.Get("Location"))
	code, body = get(t, c, ts.URL+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Retried: the job is available again")
	require.Regexp(t, fmt.Sprintf(`data-job="%d" data-state="available" data-token="(\d+)" data-attempt="0"`, id), body)
	back, err := f.admin.Job(ctx, id)
	require.NoError(t, err)
	require.Greater(t, back.Token, dead.Token, "the retry's token is greater")
	require.Len(t, back.Errors, 3, "its past errors are kept")

	require.NoError(t, f.admin.Resume(ctx, "mail"))
	require.Eventually(t, func() bool { return f.state(t, id) == queue.StateCompleted }, 20*time.Second, 10*time.Millisecond, "a worker completes the retried job")
	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<td class="held">completed</td>`)
	require.NotContains(t, body, `class="button"`, "a completed job offers no change")

	code, _ = get(t, c, u)
	require.Equal(t, http.StatusConflict, code, "a completed job is not retried")
	code, body, _ = post(t, c, u, url.Values{"csrf": {m[1]}}, nil)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "is completed: only a dead letter (cancelled or discarded) can be retried")
	noSecret(t, body, f.url)
}

// Cancel moves a live job to the dead letters, discard deletes a dead
// letter for good; each refuses a job in the other's state; bad and
// unknown ids get a 400 or a 404, never a 500.
func TestQueueCancelAndDiscard(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	ctx := t.Context()
	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)
	id := f.enqueue(t, mailArgs{To: "e@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	live := f.enqueue(t, mailArgs{To: "f@example.com"}, &queue.EnqueueOpts{Queue: "mail"})

	code, body := get(t, c, fmt.Sprintf("%s/queue/jobs/%d", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `No attempt has ended yet.`)
	require.Contains(t, body, fmt.Sprintf(`href="/queue/jobs/%d/cancel"`, id))
	require.NotContains(t, body, fmt.Sprintf(`href="/queue/jobs/%d/retry"`, id))
	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d/discard", ts.URL, live))
	require.Equal(t, http.StatusConflict, code, "a live job is cancelled, not discarded")
	require.Contains(t, body, "is available: only a dead letter")
	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d/cancel", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "A worker running it loses its lease")
	csrf := csrfRE.FindStringSubmatch(body)[1]

	code, body, _ = post(t, c, fmt.Sprintf("%s/queue/jobs/%d/discard", ts.URL, live), url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "is available: only a dead letter (cancelled or discarded) can be discarded")
	require.Equal(t, queue.StateAvailable, f.state(t, live), "a refused discard leaves the job")

	code, _, resp := post(t, c, fmt.Sprintf("%s/queue/jobs/%d/cancel", ts.URL, id), url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	j, err := f.admin.Job(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.StateCancelled, j.State)
	require.Equal(t, "cancelled from aegis console", j.Errors[len(j.Errors)-1].Error)
	code, body = get(t, c, ts.URL+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Cancelled: the job is a dead letter now")
	require.Contains(t, body, `data-state="cancelled"`)
	code, _, _ = post(t, c, fmt.Sprintf("%s/queue/jobs/%d/cancel", ts.URL, id), url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusConflict, code, "cancelled twice")

	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d/discard", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "is deleted for good")
	code, _, resp = post(t, c, fmt.Sprintf("%s/queue/jobs/%d/discard", ts.URL, id), url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/queue?done=discarded", resp.Header.Get("Location"))
	_, err = f.admin.Job(ctx, id)
	require.ErrorIs(t, err, queue.ErrNotFound, "gone for good")
	code, body = get(t, c, ts.URL+resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Discarded: the dead letter is deleted for good")

	for _, p := range []struct {
		method, path string
		want         int
	}{
		{"GET", fmt.Sprintf("/queue/jobs/%d", id), http.StatusNotFound},
		{"GET", fmt.Sprintf("/queue/jobs/%d/retry", id), http.StatusNotFound},
		{"POST", fmt.Sprintf("/queue/jobs/%d/discard", id), http.StatusNotFound},
		{"POST", "/queue/jobs/99999999/cancel", http.StatusNotFound},
		{"GET", "/queue/jobs/abc", http.StatusBadRequest},
		{"GET", "/queue/jobs/-1", http.StatusBadRequest},
		{"GET", "/queue/jobs/0", http.StatusBadRequest},
		{"GET", "/queue/jobs/1e3", http.StatusBadRequest},
		{"GET", "/queue/jobs/99999999999999999999", http.StatusBadRequest},
		{"GET", "/queue/jobs/abc/retry", http.StatusBadRequest},
		{"POST", "/queue/jobs/abc/retry", http.StatusBadRequest},
		{"GET", fmt.Sprintf("/queue/jobs/%d/explode", live), http.StatusNotFound},
		{"POST", fmt.Sprintf("/queue/jobs/%d/explode", live), http.StatusNotFound},
	} {
		var code int
		var body string
		if p.method == "GET" {
			code, body = get(t, c, ts.URL+p.path)
		} else {
			code, body, _ = post(t, c, ts.URL+p.path, url.Values{"csrf": {csrf}}, nil)
		}
		require.Equal(t, p.want, code, "%s %s: %s", p.method, p.path, body)
	}
	require.Equal(t, queue.StateAvailable, f.state(t, live))

	big := f.enqueue(t, mailArgs{To: strings.Repeat("x", 10000)}, &queue.EnqueueOpts{Queue: "mail"})
	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d", ts.URL, big))
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.Contains(body, `The first 8192 of 10010 characters.`), "the args' length (jsonb's text) is said")
	require.False(t, strings.Contains(body, strings.Repeat("x", 8200)), "the args are bounded")
}

// Read-only hides every control of the queue and refuses the changes; a
// console with a token refuses the queue's pages without it.
func TestQueueReadOnlyAndAccess(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	live := f.enqueue(t, mailArgs{To: "g@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	dead := f.enqueue(t, mailArgs{To: "h@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	require.NoError(t, f.admin.CancelJob(t.Context(), dead, ""))

	ts := serve(t, &console.Config{DB: f.db, ReadOnly: true})
	c := client(t)
	for _, p := range []string{"/queue", fmt.Sprintf("/queue/jobs/%d", live), fmt.Sprintf("/queue/jobs/%d", dead), "/queue/jobs?queue=mail&state=cancelled"} {
		code, body := get(t, c, ts.URL+p)
		require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
		require.Contains(t, body, "read-only", p)
		for _, op := range []string{"/retry", "/cancel", "/discard", `name="csrf"`} {
			require.NotContains(t, body, op, p)
		}
	}
	for _, op := range []struct {
		id int64
		op string
	}{{dead, "retry"}, {live, "cancel"}, {dead, "discard"}} {
		u := fmt.Sprintf("%s/queue/jobs/%d/%s", ts.URL, op.id, op.op)
		code, _ := get(t, c, u)
		require.Equal(t, http.StatusForbidden, code, op.op)
		code, _, _ = post(t, c, u, url.Values{"csrf": {"00"}}, nil)
		require.Equal(t, http.StatusForbidden, code, op.op)
	}
	require.Equal(t, queue.StateAvailable, f.state(t, live))
	require.Equal(t, queue.StateCancelled, f.state(t, dead))

	guarded := serve(t, &console.Config{DB: f.db, Addr: "0.0.0.0:7080", Token: "queue-test-token"})
	for _, p := range []string{"/queue", fmt.Sprintf("/queue/jobs/%d", live), fmt.Sprintf("/queue/jobs/%d/cancel", live)} {
		code, body := get(t, c, guarded.URL+p)
		require.Equal(t, http.StatusUnauthorized, code, p)
		require.NotContains(t, body, "mail", p)
	}
	code, _, _ := post(t, c, fmt.Sprintf("%s/queue/jobs/%d/cancel", guarded.URL, live), url.Values{}, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, queue.StateAvailable, f.state(t, live))
}

// A database without the queue's tables, and a SQLite one, say so.
func TestQueueNotHere(t *testing.T) {
	t.Parallel()
	pg := testenv.PostgresSQL(t)
	ts := serve(t, &console.Config{DB: pg})
	code, body := get(t, client(t), ts.URL+"/queue")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "The queue is not used in this database: it has no table <code>aegis_job</code>")
	for _, p := range []string{"/queue/jobs/1", "/queue/jobs/1/retry", "/queue/jobs?queue=mail&state=available"} {
		code, body = get(t, client(t), ts.URL+p)
		require.Equal(t, http.StatusNotFound, code, p)
		require.Contains(t, body, "the queue is not used in this database", p)
	}
	code, _, _ = post(t, client(t), ts.URL+"/queue/jobs/1/cancel", url.Values{"csrf": {csrfOf(t, client(t), ts.URL)}}, nil)
	require.Equal(t, http.StatusNotFound, code)
	var n int
	require.NoError(t, pg.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&n))
	require.Zero(t, n, "the console created no table")

	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "aegis.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ts = serve(t, &console.Config{DB: db})
	code, body = get(t, client(t), ts.URL+"/queue")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "The queue runs on PostgreSQL only")
	for _, p := range []string{"/queue/jobs/1", "/queue/jobs?queue=mail&state=available"} {
		code, body = get(t, client(t), ts.URL+p)
		require.Equal(t, http.StatusNotFound, code, p)
		require.Contains(t, body, "PostgreSQL only", p)
	}
}

// BenchmarkQueueConsole measures what the queue's pages cost, in rounds
// interleaved with the operation they are compared with:
//
//   - change: a cancel through the console (a POST: the tables checked, a
//     pool opened from the handle's configuration, CancelJob, the pool
//     closed) against CancelJob on a long-lived client;
//   - page: GET /queue with 100000 live and 100000 dead jobs against GET
//     /queue on an empty queue, both in the same database server.
//
// go test -run '^$' -bench BenchmarkQueueConsole -benchtime 1x ./console/
func BenchmarkQueueConsole(b *testing.B) {
	f := newQueueFixture(b)
	ctx := b.Context()
	ts := httptestServe(b, f.db)
	c := &http.Client{Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrf := csrfOf(b, c, ts.URL)
	const rounds, per = 10, 20
	var viaConsole, direct time.Duration
	for range rounds {
		ids := make([]int64, 2*per)
		for i := range ids {
			res, err := f.admin.Enqueue(ctx, mailArgs{To: "x@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
			require.NoError(b, err)
			ids[i] = res.Job.ID
		}
		start := time.Now()
		for _, id := range ids[:per] {
			resp, err := c.PostForm(fmt.Sprintf("%s/queue/jobs/%d/cancel", ts.URL, id), url.Values{"csrf": {csrf}})
			require.NoError(b, err)
			resp.Body.Close()
			require.Equal(b, http.StatusSeeOther, resp.StatusCode)
		}
		viaConsole += time.Since(start)
		start = time.Now()
		for _, id := range ids[per:] {
			require.NoError(b, f.admin.CancelJob(ctx, id, ""))
		}
		direct += time.Since(start)
	}
	n := time.Duration(rounds * per)
	b.Logf("change: console %v, CancelJob %v per cancel: ratio %.1f; loadavg %s", viaConsole/n, direct/n, float64(viaConsole)/float64(direct), loadavg())

	// Another schema (testenv.Postgres: a fresh one per call), with the
	// queue's tables and no job.
	emptyPool := testenv.Postgres(b)
	require.NoError(b, queue.Migrate(ctx, emptyPool))
	emptyDB := stdlib.OpenDBFromPool(emptyPool)
	b.Cleanup(func() { emptyDB.Close() })
	emptyTS := httptestServe(b, emptyDB)
	var ps []queue.EnqueueParams
	for i := range 100000 {
		ps = append(ps, queue.EnqueueParams{Args: mailArgs{To: fmt.Sprintf("%d@example.com", i)}, Opts: &queue.EnqueueOpts{Queue: fmt.Sprintf("q%d", i%5)}})
	}
	_, err := f.admin.EnqueueMany(ctx, ps)
	require.NoError(b, err)
	_, err = f.pool.Exec(ctx, `INSERT INTO aegis_job_finished (id, queue, kind, args, priority, run_at, state, attempt, max_attempts, token, errors, created_at, attempted_at, finalized_at)
		SELECT id + 10000000, queue, kind, args, priority, run_at - interval '1 minute', 'discarded', 1, 1, 2, '[{"attempt": 1, "token": 1, "at": "2026-01-01T00:00:00Z", "error": "boom"}]', created_at, now() - interval '30 seconds', now() FROM aegis_job`)
	require.NoError(b, err)
	_, err = f.pool.Exec(ctx, `ANALYZE aegis_job; ANALYZE aegis_job_finished`)
	require.NoError(b, err)
	var full, none time.Duration
	for r := range rounds {
		pages := []struct {
			u string
			d *time.Duration
		}{{ts.URL, &full}, {emptyTS.URL, &none}}
		if r%2 == 1 {
			pages[0], pages[1] = pages[1], pages[0]
		}
		for _, p := range pages {
			start := time.Now()
			resp, err := c.Get(p.u + "/queue")
			require.NoError(b, err)
			resp.Body.Close()
			require.Equal(b, http.StatusOK, resp.StatusCode)
			*p.d += time.Since(start)
		}
	}
	b.Logf("page: /queue with 200000 jobs %v, empty %v: ratio %.1f; loadavg %s", full/rounds, none/rounds, float64(full)/float64(none), loadavg())
}

func httptestServe(b *testing.B, db *sql.DB) *httptest.Server {
	s, err := console.New(b.Context(), &console.Config{DB: db, Addr: "127.0.0.1:0"})
	require.NoError(b, err)
	ts := httptest.NewServer(s)
	b.Cleanup(ts.Close)
	return ts
}

// csrfOf reads the console's CSRF field from a confirmation (a
// schedule's, which any database has).
func csrfOf(t testing.TB, c *http.Client, base string) string {
	t.Helper()
	resp, err := c.Get(base + "/schedules/none/pause")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := csrfRE.FindSubmatch(body)
	require.NotNil(t, m, "a confirmation page: %s", body)
	return string(m[1])
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// A running job cancelled from the console: its worker's lease is lost
// (the handler's context is cancelled with aegis.ErrLost at the next
// heartbeat), and the completion it tries afterwards does not land.
func TestQueueCancelRunningJob(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	started := make(chan int64, 1)
	causes := make(chan error, 1)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[mailArgs](func(ctx context.Context, job *queue.Job[mailArgs]) error {
		started <- job.ID
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
		}
		causes <- context.Cause(ctx)
		return nil // a completion, which the fence must refuse
	}))
	w, err := queue.New(f.pool, &queue.Config{Queues: map[string]queue.QueueConfig{"mail": {MaxWorkers: 1}}, Workers: ws,
		Lease: time.Second, CompletedRetention: time.Hour, Logger: quietLog()})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	id := f.enqueue(t, mailArgs{To: "i@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	require.Equal(t, id, testenv.Recv(t, started, 20*time.Second, "the handler starts"))
	running, err := f.admin.Job(t.Context(), id)
	require.NoError(t, err)

	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)
	code, body := get(t, c, fmt.Sprintf("%s/queue/jobs/%d", ts.URL, id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, fmt.Sprintf(`data-job="%d" data-state="running" data-token="%d"`, id, running.Token))
	require.Contains(t, body, fmt.Sprintf(`<td class="num">1</td><td class="num token">%d</td>`, running.Token), "the current attempt and its token")
	code, _, _ = post(t, c, fmt.Sprintf("%s/queue/jobs/%d/cancel", ts.URL, id), url.Values{"csrf": {csrfOf(t, c, ts.URL)}}, nil)
	require.Equal(t, http.StatusSeeOther, code)

	cause := testenv.Recv(t, causes, 20*time.Second, "the handler's context is cancelled")
	require.ErrorIs(t, cause, aegis.ErrLost)
	stopCtx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx), "the client writes what it can and stops")
	j, err := f.admin.Job(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, queue.StateCancelled, j.State, "the old holder's completion did not land")
	require.Greater(t, j.Token, running.Token)
}
