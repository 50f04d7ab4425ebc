package console_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/queue"
)

// frozenWorkerEnv holds the database URL when the test binary runs as the
// frozen worker: a queue client working queue "mail" whose handler says
// which job it claimed and then hangs, until the test freezes the whole
// process (SIGSTOP) and, at its end, kills it.
const frozenWorkerEnv = "AEGIS_CONSOLE_FROZEN_WORKER_URL"

func init() {
	if u := os.Getenv(frozenWorkerEnv); u != "" {
		os.Exit(frozenWorker(u))
	}
}

func frozenWorker(u string) int {
	ctx := context.Background()
	p, err := pgxpool.New(ctx, u)
	if err != nil {
		fmt.Fprintln(os.Stderr, "frozen worker:", err)
		return 1
	}
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[mailArgs](func(_ context.Context, job *queue.Job[mailArgs]) error {
		fmt.Printf("claimed %d\n", job.ID)
		select {} // mid-job, until SIGKILL
	}))
	c, err := queue.New(p, &queue.Config{ID: "web-3/frozen", Queues: map[string]queue.QueueConfig{"mail": {MaxWorkers: 1}},
		Workers: ws, Lease: time.Second})
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "frozen worker:", err)
		return 1
	}
	select {}
}

// startFrozenWorker starts the worker process, waits until it claimed
// job id, and freezes it (SIGSTOP) mid-job: its heartbeats and its reaper
// stop with it. It is killed when the test ends.
func startFrozenWorker(t *testing.T, storeURL string, id int64) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), frozenWorkerEnv+"="+storeURL)
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	child.Stderr = &stderr
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		require.Equal(t, fmt.Sprintf("claimed %d", id), line)
	case <-time.After(20 * time.Second):
		_ = child.Process.Kill()
		_ = child.Wait()
		waited = true
		t.Fatalf("the worker process did not claim job %d within 20s; its stderr: %s", id, stderr.String())
	}
	require.NoError(t, child.Process.Signal(syscall.SIGSTOP), "the worker freezes mid-job")
}

// The overview answers "which queue jobs are stuck or overdue?" with a
// worker process frozen mid-job (SIGSTOP: its job runs past its lease and
// nobody reaps it), two jobs due twelve minutes ago that nobody takes, and
// dead letters; each card links to a list whose rows say their age in
// words, the absolute time on hover.
func TestQueueTriage(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	ctx := t.Context()
	frozen := f.enqueue(t, mailArgs{To: "frozen@example.com"}, &queue.EnqueueOpts{Queue: "mail"})
	startFrozenWorker(t, f.url, frozen)
	in, err := queue.NewInspector(f.db, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := in.Stuck(ctx, "mail", 10)
		return err == nil && len(s) == 1 && s[0].ID == frozen
	}, 20*time.Second, 10*time.Millisecond, "the frozen worker's job runs past its lease")

	var overdue []int64
	for i := range 2 {
		overdue = append(overdue, f.enqueue(t, mailArgs{To: fmt.Sprintf("late%d@example.com", i)},
			&queue.EnqueueOpts{Queue: "mail", RunAt: time.Now().Add(-12*time.Minute + time.Duration(i)*time.Second)}))
	}
	f.enqueue(t, mailArgs{To: "now@example.com"}, &queue.EnqueueOpts{Queue: "mail"}) // due now: waiting, not overdue
	for i := range 2 {
		id := f.enqueue(t, mailArgs{To: fmt.Sprintf("dead%d@example.com", i)}, &queue.EnqueueOpts{Queue: "reports"})
		require.NoError(t, f.admin.CancelJob(ctx, id, "not wanted"))
		if i == 1 {
			_, err := f.pool.Exec(ctx, `UPDATE aegis_job_finished SET finalized_at = now() - interval '3 hours' WHERE id = $1`, id)
			require.NoError(t, err)
		}
	}

	ts := serve(t, &console.Config{DB: f.db})
	c := client(t)
	code, body := get(t, c, ts.URL+"/")
	require.Equal(t, http.StatusOK, code, body)
	noSecret(t, body, f.url)
	require.Regexp(t, `<a href="/queue/jobs\?state=stuck" id="card-queue-stuck" data-count="1" class="warn"[^>]*><b>1</b> queue jobs stuck`, body)
	require.Regexp(t, `<a href="/queue/jobs\?state=overdue" id="card-queue-overdue" data-count="2" class="warn"[^>]*><b>2</b> queue jobs overdue \(due more than 30s ago, not started\)`, body)
	require.Regexp(t, `<a href="/queue#dead-letters" id="card-queue-dead" data-count="2" data-hour="1" data-day="2" class="warn"[^>]*><b>2</b> dead jobs in the last 24 h, 1 in the last hour`, body)
	oldest := regexp.MustCompile(`(?s)<a href="/queue#queues" id="card-queue-oldest" data-count="1"[^>]*><b title="due [^"]+">1[2-9]m\d\ds</b> oldest waiting job(.*?)</a>`).FindStringSubmatch(body)
	require.NotNil(t, oldest, "the oldest waiting job: mail's, due twelve minutes ago: %s", body)
	require.Regexp(t, fmt.Sprintf(`^<span class="oldest" data-queue="mail" data-job="%d" data-leased="0"><br><code>mail</code>: due <span title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">1[2-9]m\d\ds ago</span>, <span class="warn">no job with a current lease</span>, last start <span title="[^"]+">\d[^<]* ago</span></span>$`, overdue[0]), oldest[1],
		"its worker holds no current lease; its last start was the frozen job's")

	code, body = get(t, c, ts.URL+"/queue/jobs?state=stuck")
	require.Equal(t, http.StatusOK, code, body)
	rows := regexp.MustCompile(`<tr data-job="(\d+)" data-state="(\w+)"`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 1, body)
	require.Equal(t, []string{fmt.Sprint(frozen), "running"}, rows[0][1:])
	require.Regexp(t, `(?s)<td>running <b class="warn age" title="lease ended \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">stuck \d[^<]*</b></td>.*<td>web-3/frozen</td>`, body)
	require.Regexp(t, `<td title="[^"]+">expired \d[^<]* ago</td>`, body, "its lease, relative")

	code, body = get(t, c, ts.URL+"/queue/jobs?state=overdue")
	require.Equal(t, http.StatusOK, code, body)
	rows = regexp.MustCompile(`<tr data-job="(\d+)" data-state="(\w+)"`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 2, body)
	for i, id := range overdue {
		require.Equal(t, []string{fmt.Sprint(id), "available"}, rows[i][1:], "the longest overdue first")
		row := regexp.MustCompile(fmt.Sprintf(`(?s)<tr data-job="%d".*?</tr>`, id)).FindString(body)
		require.Regexp(t, `<td>available <b class="warn age" title="due \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">overdue 1[1-9]m\d\ds</b></td>`, row)
		require.Regexp(t, `<td title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">1[12]m\d\ds ago</td><td title="—">—</td>`, row, "due, relative; never started")
	}
	require.Regexp(t, fmt.Sprintf(`<li data-queue="mail" data-leased="0"><code>mail</code>: oldest waiting job <a href="/queue/jobs/%d">%d</a>, due <span title="[^"]+">1[2-9]m\d\ds ago</span>; <span class="warn">no job with a current lease</span>; last start`, overdue[0], overdue[0]), body)
	code, body = get(t, c, ts.URL+"/queue/jobs?state=overdue&queue=reports")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "<tr data-job=", "no overdue job in reports")
	require.Contains(t, body, "<h1>Overdue jobs of queue reports</h1>")
	require.NotContains(t, body, `<li data-queue="mail"`, "another queue's worker line")
	code, body = get(t, c, ts.URL+"/queue/jobs?state=overdue&queue=mail")
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, regexp.MustCompile(`<tr data-job="(\d+)" data-state="available"`).FindAllString(body, -1), 2, body)
	require.Contains(t, body, `<li data-queue="mail" data-leased="0">`)

	code, body = get(t, c, fmt.Sprintf("%s/queue/jobs/%d", ts.URL, frozen))
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `<b class="warn" title="lease ended [^"]+">stuck \d[^<]*: running past its lease</b>`, body)
	require.Regexp(t, `<tr><th>enqueued</th><td title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}">\d[^<]* ago</td></tr>`, body)

	code, body = get(t, c, ts.URL+"/queue")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<a class="warn" href="/queue/jobs?queue=mail&amp;state=stuck"><span data-stuck="1">(1 stuck)</span></a>`)
	require.Regexp(t, fmt.Sprintf(`(?s)id="stuck".*<tr data-job="%d" data-state="running" data-token="1">.*stuck \d.*id="dead-letters"`, frozen), body)

	// Mounted under a prefix, every link of these pages starts with it,
	// and each card's link answers.
	const prefix = "/admin/aegis"
	mounted := serve(t, &console.Config{DB: f.db, Prefix: prefix})
	href := regexp.MustCompile(`href="([^"]*)"`)
	for _, p := range []string{"/", "/queue", "/queue/jobs?state=stuck", "/queue/jobs?state=overdue", fmt.Sprintf("/queue/jobs/%d", frozen)} {
		code, body := get(t, c, mounted.URL+prefix+p)
		require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
		for _, m := range href.FindAllStringSubmatch(body, -1) {
			require.True(t, strings.HasPrefix(m[1], prefix+"/"), "%s links to %s", p, m[1])
		}
	}
	_, body = get(t, c, mounted.URL+prefix+"/")
	for _, card := range []string{"card-queue-stuck", "card-queue-overdue", "card-queue-dead", "card-queue-oldest"} {
		m := regexp.MustCompile(`<a href="([^"]+)" id="` + card + `"`).FindStringSubmatch(body)
		require.NotNil(t, m, card)
		code, page := get(t, c, mounted.URL+html.UnescapeString(m[1]))
		require.Equal(t, http.StatusOK, code, "%s → %s: %s", card, m[1], page)
	}
}

// Where there is no queue, SQLite or a database without its tables, the
// overview has no queue card (not a zero), and the filtered lists say why.
func TestQueueTriageNoQueue(t *testing.T) {
	t.Parallel()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "aegis.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for name, db := range map[string]*console.Config{"sqlite": {DB: db}, "no tables": {DB: testenv.PostgresSQL(t)}} {
		ts := serve(t, db)
		code, body := get(t, client(t), ts.URL+"/")
		require.Equal(t, http.StatusOK, code, "%s: %s", name, body)
		require.Contains(t, body, `id="card-leases"`, name)
		require.NotContains(t, body, `card-queue`, name)
		for _, state := range []string{"stuck", "overdue"} {
			code, body = get(t, client(t), ts.URL+"/queue/jobs?state="+state)
			require.Equal(t, http.StatusNotFound, code, "%s: %s", name, state)
			require.True(t, strings.Contains(body, "PostgreSQL only") || strings.Contains(body, "not used in this database"), body)
		}
	}
}
