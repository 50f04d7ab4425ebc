package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/queue"
)

// The queue's pages read its tables (those of Config.QueueTable; by
// default aegis_job, the live jobs; aegis_job_finished, the completed ones
// it keeps and the dead letters; aegis_queue, the paused flags) through
// package queue's Inspector, in
// database time. Changes go through package queue's administration
// functions (RetryDead, CancelJob, DiscardDead) on a client that is never
// started: it claims nothing and runs no handler.

// Bounds of what a queue page reads and shows.
const (
	deadShown     = 50   // dead letters on /queue
	stuckShown    = 50   // stuck jobs on /queue
	jobsShown     = 100  // jobs of a queue and state
	argsShown     = 8192 // characters of a job's args (their jsonb text)
	errorsShown   = 100  // the latest entries of a job's errors
	errorLenShown = 2000 // characters of one error
)

// queueStates are the states a job can be in, in their order on the page.
var queueStates = []queue.State{queue.StateAvailable, queue.StateScheduled, queue.StateRunning,
	queue.StateCompleted, queue.StateCancelled, queue.StateDiscarded}

// queueNotices are what a queue page says after a change redirected to it.
var queueNotices = map[string]string{
	"retried":   "Retried: the job is available again, with a fresh count of attempts and a greater token",
	"cancelled": "Cancelled: the job is a dead letter now; a worker that was running it can write nothing more for it",
	"discarded": "Discarded: the dead letter is deleted for good",
}

// queueCount is one queue's line on /queue: package queue's summary, and
// how the page shows its rates and waits.
type queueCount struct {
	queue.Summary
	PerMinute string
	Bars      []bar // the minutes as a chart, when there are completions
	P50, P95  string
}

type queueData struct {
	PostgresOnly   bool   // a SQLite database: the queue runs on PostgreSQL only
	Missing        string // the queue's table that is missing
	Queues         []queueCount
	States         []queue.State
	KeepsCompleted bool // aegis_job_finished holds completed jobs (queue.Config.CompletedRetention)
	Stuck, Dead    jobRows
	DeadShown      int
}

// jobRows is a list of jobs for the template that shows them (which hides
// the controls of a read-only console), with its times relative to the
// database's now. Show is the filter that listed them, stuck or overdue,
// whose age each row says ("stuck 12m00s").
type jobRows struct {
	Jobs     []queue.JobSummary
	ReadOnly bool
	Show     string
	clock
}

// queueMissing tells whether the database has the queue's tables: ""
// when it has, else what the page says instead.
func (s *Server) queueMissing(ctx context.Context) (sqlite bool, missing string, err error) {
	if s.st.dialect == migrate.SQLite {
		return true, "", nil
	}
	missing, err = s.st.queueTables.Missing(ctx)
	return false, missing, err
}

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := queueData{States: queueStates, DeadShown: deadShown}
	var err error
	if d.PostgresOnly, d.Missing, err = s.queueMissing(ctx); err != nil {
		s.fail(w, err)
		return
	}
	if !d.PostgresOnly && d.Missing == "" {
		if err := s.readQueues(ctx, &d); err != nil {
			s.fail(w, err)
			return
		}
	}
	s.renderQueue(w, r, "queue", "Queue", d)
}

func (s *Server) readQueues(ctx context.Context, d *queueData) error {
	in := s.st.queueTables
	sums, err := in.Summary(ctx)
	if err != nil {
		return err
	}
	for _, q := range sums {
		d.Queues = append(d.Queues, queueCount{Summary: q,
			PerMinute: strconv.FormatFloat(float64(q.Completed)/60, 'f', 2, 64),
			Bars:      bars(q.Minutes), P50: wait(q.WaitP50), P95: wait(q.WaitP95)})
	}
	if d.KeepsCompleted, err = in.KeepsCompleted(ctx); err != nil {
		return err
	}
	now, err := s.st.now(ctx)
	if err != nil {
		return err
	}
	d.Stuck = jobRows{ReadOnly: s.cfg.ReadOnly, Show: showStuck, clock: clock{now}}
	d.Dead = jobRows{ReadOnly: s.cfg.ReadOnly, clock: clock{now}}
	if d.Stuck.Jobs, err = in.Stuck(ctx, "", stuckShown); err != nil {
		return err
	}
	if d.Dead.Jobs, err = in.Dead(ctx, deadShown); err != nil {
		return err
	}
	return nil
}

// bar is a minute of the completions chart (an inline SVG: the page's
// Content-Security-Policy allows no script and no inline style).
type bar struct {
	X, Y, H int
	N       int64
	Ago     int // minutes
}

// bars draws the minutes, 2 px a minute and 22 px for the busiest; none
// when no job completed.
func bars(minutes [60]int64) []bar {
	top := slices.Max(minutes[:])
	if top == 0 {
		return nil
	}
	out := make([]bar, 0, len(minutes))
	for i, n := range minutes {
		h := int((n*22 + top - 1) / top) // a minute with completions shows at least 1 px
		out = append(out, bar{X: 2 * i, Y: 24 - h, H: h, N: n, Ago: 59 - i})
	}
	return out
}

// wait prints a wait ("<1ms" rather than "0ms").
func wait(d time.Duration) string {
	if d < time.Millisecond {
		return "<1ms"
	}
	return short(d)
}

// The filters of /queue/jobs besides the states: they list every queue's
// jobs, or one queue's with ?queue=.
const (
	showStuck   = "stuck"   // running past their lease (queue.Inspector.Stuck)
	showOverdue = "overdue" // waiting past due by overdueGrace (queue.Inspector.Overdue)
)

type jobsData struct {
	Queue string // "" for every queue (stuck, overdue)
	State string
	Jobs  jobRows
	Shown int
	Grace string
	// Queues are the overdue list's queues with their oldest waiting job
	// and what tells whether a worker is there.
	Queues []queue.Waiting
}

// jobs lists the jobs of one queue in one state, newest first, or the
// stuck or overdue jobs of every queue (or of ?queue=), the longest first.
func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q, state := r.URL.Query().Get("queue"), r.URL.Query().Get("state")
	filter := state == showStuck || state == showOverdue
	switch {
	case q == "" && !filter:
		http.Error(w, "the parameter queue is missing: /queue/jobs?queue=NAME&state=STATE (or state=stuck or state=overdue, of every queue)", http.StatusBadRequest)
		return
	case !filter && !slices.Contains(queueStates, queue.State(state)):
		http.Error(w, fmt.Sprintf("state %.40q is not a state of a job: want one of %v, or stuck or overdue", state, queueStates), http.StatusBadRequest)
		return
	}
	if s.queueUnavailable(w, r) {
		return
	}
	now, err := s.st.now(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	d := jobsData{Queue: q, State: state, Shown: jobsShown, Grace: overdueGrace.String(),
		Jobs: jobRows{ReadOnly: s.cfg.ReadOnly, clock: clock{now}}}
	in := s.st.queueTables
	var title string
	switch state {
	case showStuck:
		d.Jobs.Show, title = showStuck, "Stuck jobs"
		d.Jobs.Jobs, err = in.Stuck(ctx, q, jobsShown)
	case showOverdue:
		d.Jobs.Show, title = showOverdue, "Overdue jobs"
		if d.Jobs.Jobs, err = in.Overdue(ctx, q, overdueGrace, jobsShown); err == nil {
			var h *queue.Health
			if h, err = in.Health(ctx, overdueGrace, oldestShown); err == nil {
				d.Queues = slices.DeleteFunc(h.Oldest, func(w queue.Waiting) bool { return q != "" && w.Queue != q })
			}
		}
	default:
		title = fmt.Sprintf("Queue %s: %s jobs", q, state)
		d.Jobs.Jobs, err = in.Jobs(ctx, q, queue.State(state), jobsShown)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	if filter && q != "" {
		title += " of queue " + q
	}
	s.renderQueue(w, r, "queuejobs", title, d)
}

// queueUnavailable answers a request for a job where there is no queue,
// and reports whether it did.
func (s *Server) queueUnavailable(w http.ResponseWriter, r *http.Request) bool {
	sqlite, missing, err := s.queueMissing(r.Context())
	switch {
	case err != nil:
		s.fail(w, err)
	case sqlite:
		http.Error(w, "the queue runs on PostgreSQL only: this SQLite database has no queue", http.StatusNotFound)
	case missing != "":
		http.Error(w, "the queue is not used in this database (it has no table "+missing+")", http.StatusNotFound)
	default:
		return false
	}
	return true
}

// jobDetail is a job as /queue/jobs/{id} shows it: package queue's
// detail, with its args indented when whole and its errors cut.
type jobDetail struct {
	queue.JobDetail
	ArgsCut        bool
	EarlierEntries int // entries not shown
	Live, Dead     bool
	StuckNow       bool
	Ops            []jobOpLink // the changes the job's state allows
	clock
}

// errNoJob is a job id that names no job.
var errNoJob = errors.New("no such job")

func (s *Server) readJob(ctx context.Context, id int64) (*jobDetail, error) {
	qj, err := s.st.queueTables.Job(ctx, id, argsShown, errorsShown)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, errNoJob
	}
	if err != nil {
		return nil, err
	}
	now, err := s.st.now(ctx)
	if err != nil {
		return nil, err
	}
	j := jobDetail{JobDetail: *qj, StuckNow: qj.Stuck, clock: clock{now}}
	j.EarlierEntries = j.Errors - len(j.Entries)
	for i := range j.Entries {
		j.Entries[i].Error = cut(j.Entries[i].Error, errorLenShown)
	}
	// The args as stored; indented when they are whole (a cut JSON text
	// does not parse).
	j.ArgsCut = j.ArgsLen > len(j.Args)
	if !j.ArgsCut {
		var b bytes.Buffer
		if json.Indent(&b, []byte(j.Args), "", "  ") == nil {
			j.Args = b.String()
		}
	}
	j.Live = j.State == queue.StateAvailable || j.State == queue.StateScheduled || j.State == queue.StateRunning
	j.Dead = j.State == queue.StateCancelled || j.State == queue.StateDiscarded
	for _, op := range []string{"retry", "cancel", "discard"} {
		if o := jobOps[op]; o.allowed(&j) {
			j.Ops = append(j.Ops, jobOpLink{op, o.verb})
		}
	}
	return &j, nil
}

// cut shortens s to n characters, saying so.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + fmt.Sprintf("… (%d characters more)", len(r)-n)
}

// jobID parses the id of a job's address: a bad one is a 400.
func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		http.Error(w, fmt.Sprintf("job id %.40q is not a job's id (a positive integer)", v), http.StatusBadRequest)
		return 0, false
	}
	return id, true
}

// findJob reads the job of the address, answering a bad id (400), no
// queue or no such job (404) itself.
func (s *Server) findJob(w http.ResponseWriter, r *http.Request) (*jobDetail, bool) {
	id, ok := jobID(w, r)
	if !ok || s.queueUnavailable(w, r) {
		return nil, false
	}
	j, err := s.readJob(r.Context(), id)
	switch {
	case errors.Is(err, errNoJob):
		http.Error(w, fmt.Sprintf("no job %d: it never existed, or it completed and was not kept, or it was discarded for good", id), http.StatusNotFound)
		return nil, false
	case err != nil:
		s.fail(w, err)
		return nil, false
	}
	return j, true
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	j, ok := s.findJob(w, r)
	if !ok {
		return
	}
	s.renderQueue(w, r, "job", fmt.Sprintf("Job %d", j.ID), j)
}

// jobOps are the changes of a job: what the confirmation says and which
// function of package queue makes them.
var jobOps = map[string]struct {
	verb, question, done string
	allowed              func(*jobDetail) bool
	refused              string // why a job in another state is refused
	do                   func(context.Context, *queue.Client, int64) error
}{
	"retry": {
		verb: "Retry", done: "retried",
		question: "Job %d (%s) goes back into queue %q, available at once, with a fresh count of attempts and a greater token; its past errors are kept.",
		allowed:  func(j *jobDetail) bool { return j.Dead },
		refused:  "only a dead letter (cancelled or discarded) can be retried",
		do: func(ctx context.Context, c *queue.Client, id int64) error {
			_, err := c.RetryDead(ctx, id)
			return err
		},
	},
	"cancel": {
		verb: "Cancel", done: "cancelled",
		question: "Job %d (%s) of queue %q goes to the dead letters, cancelled, with a greater token. A worker running it loses its lease: its handler's context is cancelled at its next heartbeat, and nothing it writes for the job lands (its other side effects do, unless they are fenced with the job's token).",
		allowed:  func(j *jobDetail) bool { return j.Live },
		refused:  "only a live job (available, scheduled or running) can be cancelled",
		do: func(ctx context.Context, c *queue.Client, id int64) error {
			return c.CancelJob(ctx, id, "cancelled from aegis console")
		},
	},
	"discard": {
		verb: "Discard", done: "discarded",
		question: "Dead letter %d (%s) of queue %q is deleted for good: it can no longer be retried, and its errors are gone with it.",
		allowed:  func(j *jobDetail) bool { return j.Dead },
		refused:  "only a dead letter (cancelled or discarded) can be discarded: cancel a live job first",
		do:       func(ctx context.Context, c *queue.Client, id int64) error { return c.DiscardDead(ctx, id) },
	},
}

// jobOpLink is a change a job page offers.
type jobOpLink struct{ Op, Verb string }

type jobConfirmData struct {
	ID                 int64
	Op, Verb, Question string
}

func (s *Server) jobConfirm(w http.ResponseWriter, r *http.Request) {
	o, ok := jobOps[r.PathValue("op")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if s.cfg.ReadOnly {
		http.Error(w, "this console is read-only", http.StatusForbidden)
		return
	}
	j, ok := s.findJob(w, r)
	if !ok {
		return
	}
	if !o.allowed(j) {
		http.Error(w, fmt.Sprintf("job %d is %s: %s", j.ID, j.State, o.refused), http.StatusConflict)
		return
	}
	s.renderQueue(w, r, "jobconfirm", fmt.Sprintf("%s job %d?", o.verb, j.ID),
		jobConfirmData{ID: j.ID, Op: r.PathValue("op"), Verb: o.verb, Question: fmt.Sprintf(o.question, j.ID, j.Kind, j.Queue)})
}

func (s *Server) jobEdit(w http.ResponseWriter, r *http.Request) {
	if no := s.checkMutation(r); no != nil {
		s.log.Warn("console: change refused", "path", r.URL.Path, "why", no.msg)
		http.Error(w, no.msg, no.status)
		return
	}
	op := r.PathValue("op")
	o, ok := jobOps[op]
	if !ok {
		http.NotFound(w, r)
		return
	}
	id, ok := jobID(w, r)
	if !ok || s.queueUnavailable(w, r) {
		return
	}
	c, done, err := s.queueAdmin(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	err = o.do(r.Context(), c, id)
	done()
	if errors.Is(err, queue.ErrNotFound) {
		// The queue refused the job's state, or there is no job: which?
		j, rerr := s.readJob(r.Context(), id)
		switch {
		case errors.Is(rerr, errNoJob):
			http.Error(w, err.Error(), http.StatusNotFound)
		case rerr != nil:
			s.fail(w, rerr)
		default:
			http.Error(w, fmt.Sprintf("job %d is %s: %s", id, j.State, o.refused), http.StatusConflict)
		}
		return
	}
	// RetryDead has no sentinel for a unique key a live job took since.
	if err != nil && strings.Contains(err.Error(), "a live job holds its unique key") {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("console: job changed", "op", op, "job", id)
	if op == "discard" {
		http.Redirect(w, r, s.cfg.Prefix+"/queue?done="+o.done, http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, s.cfg.Prefix+"/queue/jobs/"+strconv.FormatInt(id, 10)+"?done="+o.done, http.StatusSeeOther)
}

// queueAdmin returns a queue client on the console's database for one
// change, and the function that closes it. Package queue works on a pgx
// pool, the console on database/sql: the pool is opened from the
// configuration of the handle's own connections (pgx's database/sql
// driver), with one connection, and closed after the change (a few
// milliseconds for the connection: BenchmarkQueueConsole). A pool's
// AfterConnect hook, if the handle was opened from one, is not carried
// over. The client is never started.
func (s *Server) queueAdmin(ctx context.Context) (*queue.Client, func(), error) {
	conn, err := s.st.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("queue change: %w", err)
	}
	var cc *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("the console's PostgreSQL handle is not pgx's database/sql driver (%T): the queue's changes need it", dc)
		}
		cc = c.Conn().Config().Copy()
		return nil
	})
	_ = conn.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("queue change: %w", err)
	}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, nil, fmt.Errorf("queue change: %w", err)
	}
	pc.ConnConfig, pc.MaxConns = cc, 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("queue change: open a connection: %w", err)
	}
	c, err := queue.New(pool, &queue.Config{ID: "aegis console", Logger: s.log, Table: s.cfg.QueueTable})
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("queue change: %w", err)
	}
	return c, pool.Close, nil
}

// renderQueue is render for the queue's pages: the Queue link of the
// header stays current on each of them, and they have notices of their
// own.
func (s *Server) renderQueue(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	s.renderPage(w, r, name, "queue", queueNotices, title, data)
}
