package console

import (
	"bytes"
	"context"
	"database/sql"
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

// The queue's pages read its tables (aegis_job, the live jobs;
// aegis_job_finished, the completed ones it keeps and the dead letters;
// aegis_queue, the paused flags) with the console's own queries, in
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

// queueCount is one queue's line on /queue.
type queueCount struct {
	Queue  string
	Paused bool
	// Jobs by state; Retrying are the scheduled ones that have run before
	// (a retry's backoff, or a snooze after a failed attempt), Stuck the
	// running ones past their lease.
	Counts          map[queue.State]int64
	Retrying, Stuck int64
	// The last hour, from the finished jobs' finalized_at.
	Completed, Dead int64
	PerMinute       string
	minutes         [60]int64 // completions per minute, the oldest first
	Bars            []bar     // minutes as a chart, when there are completions
	// The wait from due (run_at) to start (attempted_at) of the jobs
	// started in the last hour, and how many were measured.
	Waits    int64
	P50, P95 string
}

// jobLine is a job in a list.
type jobLine struct {
	ID                                      int64
	Queue, Kind                             string
	State                                   queue.State
	Attempt, MaxAttempts                    int
	Token                                   int64
	LockedBy                                string
	RunAt, Attempted, LockedUntil, Finished time.Time
	LastError                               string
	Errors                                  int
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
// the controls of a read-only console).
type jobRows struct {
	Jobs     []jobLine
	ReadOnly bool
}

// queueMissing tells whether the database has the queue's tables: ""
// when it has, else what the page says instead.
func (s *Server) queueMissing(ctx context.Context) (sqlite bool, missing string, err error) {
	if s.st.dialect == migrate.SQLite {
		return true, "", nil
	}
	for _, t := range []string{"aegis_job", "aegis_job_finished", "aegis_queue"} {
		ok, err := s.st.exists(ctx, t)
		if err != nil {
			return false, "", err
		}
		if !ok {
			return false, t, nil
		}
	}
	return false, "", nil
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

const (
	// queueCountsSQL counts jobs per queue and state: the live ones with
	// those waiting for a retry and those past their lease, then the
	// finished ones.
	queueCountsSQL = `SELECT queue, state, count(*),
	count(*) FILTER (WHERE state = 'scheduled' AND attempt > 0),
	count(*) FILTER (WHERE state = 'running' AND locked_until < now())
FROM aegis_job GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*), 0, 0 FROM aegis_job_finished GROUP BY queue, state`
	queuePausedSQL = `SELECT name FROM aegis_queue WHERE paused`
	// queueHourSQL counts the jobs finished in the last hour.
	queueHourSQL = `SELECT queue, count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state <> 'completed')
FROM aegis_job_finished WHERE finalized_at >= now() - interval '1 hour' GROUP BY queue`
	// queueWaitSQL measures, per queue, how long the jobs started in the
	// last hour waited from due (run_at) to start (attempted_at): the
	// running ones and the finished ones that ended while running
	// (locked_by kept). Their run_at is the due of their last start, as no
	// write but a claim touches a running job's run_at. A job handed back
	// after its last start (a retry, a snooze, a reclaim, a hand-back: its
	// run_at moved, locked_by cleared) and then cancelled is no sample. No
	// comparison of run_at with attempted_at decides a sample: a claim's
	// now() (its transaction's start) can precede the now() of an enqueue
	// that committed before the claim's snapshot, by as long as the claiming
	// backend waited for a core (the test that counts samples lost one so
	// on a loaded machine, with 1ms of slack). Such a wait counts as 0.
	queueWaitSQL = `SELECT queue, count(*),
	percentile_cont(0.5) WITHIN GROUP (ORDER BY w), percentile_cont(0.95) WITHIN GROUP (ORDER BY w)
FROM (
	SELECT queue, greatest(0, extract(epoch FROM attempted_at - run_at))::float8 AS w FROM aegis_job
	WHERE state = 'running' AND attempted_at >= now() - interval '1 hour'
	UNION ALL
	SELECT queue, greatest(0, extract(epoch FROM attempted_at - run_at))::float8 FROM aegis_job_finished
	WHERE finalized_at >= now() - interval '1 hour' -- the index: a job started in the hour finished in it
	  AND attempted_at >= now() - interval '1 hour' AND locked_by IS NOT NULL
) s GROUP BY queue`
	// queueMinutesSQL counts the last hour's completions per queue and
	// minute (0: the current one).
	queueMinutesSQL = `SELECT queue, least(59, floor(extract(epoch FROM now() - finalized_at) / 60))::int, count(*)
FROM aegis_job_finished WHERE state = 'completed' AND finalized_at >= now() - interval '1 hour' GROUP BY 1, 2`
	queueKeepsCompletedSQL = `SELECT EXISTS (SELECT 1 FROM aegis_job_finished WHERE state = 'completed')`

	// jobLineLive and jobLineFinished are the columns of a jobLine.
	jobLineLive = `id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, locked_until, NULL::timestamptz, left(coalesce(errors->-1->>'error', ''), 300), jsonb_array_length(errors)`
	jobLineFinished = `id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, NULL::timestamptz, finalized_at, left(coalesce(errors->-1->>'error', ''), 300), jsonb_array_length(errors)`
	queueStuckSQL = `SELECT ` + jobLineLive + ` FROM aegis_job WHERE state = 'running' AND locked_until < now() ORDER BY locked_until LIMIT $1`
	queueDeadSQL  = `SELECT ` + jobLineFinished + ` FROM aegis_job_finished WHERE state <> 'completed' ORDER BY finalized_at DESC, id DESC LIMIT $1`
	queueLiveSQL  = `SELECT ` + jobLineLive + ` FROM aegis_job WHERE queue = $1 AND state = $2 ORDER BY id DESC LIMIT $3`
	queueEndedSQL = `SELECT ` + jobLineFinished + ` FROM aegis_job_finished WHERE queue = $1 AND state = $2 ORDER BY id DESC LIMIT $3`
)

func (s *Server) readQueues(ctx context.Context, d *queueData) error {
	at := map[string]*queueCount{}
	line := func(q string) *queueCount {
		if c, ok := at[q]; ok {
			return c
		}
		c := &queueCount{Queue: q, Counts: map[queue.State]int64{}}
		at[q] = c
		return c
	}
	if err := s.eachRow(ctx, queueCountsSQL, nil, func(rows *sql.Rows) error {
		var q, state string
		var n, retrying, stuck int64
		if err := rows.Scan(&q, &state, &n, &retrying, &stuck); err != nil {
			return err
		}
		c := line(q)
		c.Counts[queue.State(state)] += n
		c.Retrying += retrying
		c.Stuck += stuck
		return nil
	}); err != nil {
		return fmt.Errorf("count the jobs: %w", err)
	}
	if err := s.eachRow(ctx, queuePausedSQL, nil, func(rows *sql.Rows) error {
		var q string
		if err := rows.Scan(&q); err != nil {
			return err
		}
		line(q).Paused = true
		return nil
	}); err != nil {
		return fmt.Errorf("read the paused queues: %w", err)
	}
	if err := s.eachRow(ctx, queueHourSQL, nil, func(rows *sql.Rows) error {
		var q string
		var done, dead int64
		if err := rows.Scan(&q, &done, &dead); err != nil {
			return err
		}
		c := line(q)
		c.Completed, c.Dead = done, dead
		return nil
	}); err != nil {
		return fmt.Errorf("count the last hour's jobs: %w", err)
	}
	if err := s.eachRow(ctx, queueWaitSQL, nil, func(rows *sql.Rows) error {
		var q string
		var n int64
		var p50, p95 float64
		if err := rows.Scan(&q, &n, &p50, &p95); err != nil {
			return err
		}
		c := line(q)
		c.Waits, c.P50, c.P95 = n, seconds(p50), seconds(p95)
		return nil
	}); err != nil {
		return fmt.Errorf("measure the last hour's waits: %w", err)
	}
	if err := s.eachRow(ctx, queueMinutesSQL, nil, func(rows *sql.Rows) error {
		var q string
		var m int
		var n int64
		if err := rows.Scan(&q, &m, &n); err != nil {
			return err
		}
		if m >= 0 && m < 60 {
			line(q).minutes[59-m] += n
		}
		return nil
	}); err != nil {
		return fmt.Errorf("count the last hour's completions per minute: %w", err)
	}
	for _, c := range at {
		c.PerMinute = strconv.FormatFloat(float64(c.Completed)/60, 'f', 2, 64)
		c.Bars = bars(c.minutes)
		d.Queues = append(d.Queues, *c)
	}
	slices.SortFunc(d.Queues, func(a, b queueCount) int { return strings.Compare(a.Queue, b.Queue) })
	if err := s.st.db.QueryRowContext(ctx, queueKeepsCompletedSQL).Scan(&d.KeepsCompleted); err != nil {
		return fmt.Errorf("look for completed jobs: %w", err)
	}
	var err error
	d.Stuck.ReadOnly, d.Dead.ReadOnly = s.cfg.ReadOnly, s.cfg.ReadOnly
	if d.Stuck.Jobs, err = s.jobLines(ctx, queueStuckSQL, stuckShown); err != nil {
		return fmt.Errorf("read the stuck jobs: %w", err)
	}
	if d.Dead.Jobs, err = s.jobLines(ctx, queueDeadSQL, deadShown); err != nil {
		return fmt.Errorf("read the dead letters: %w", err)
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

// seconds prints a wait measured in seconds ("<1ms" rather than "0ms").
func seconds(v float64) string {
	if v < 0.001 {
		return "<1ms"
	}
	return short(time.Duration(v * float64(time.Second)))
}

func (s *Server) eachRow(ctx context.Context, q string, args []any, f func(*sql.Rows) error) error {
	rows, err := s.st.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (s *Server) jobLines(ctx context.Context, q string, args ...any) ([]jobLine, error) {
	var out []jobLine
	err := s.eachRow(ctx, q, args, func(rows *sql.Rows) error {
		var j jobLine
		var state string
		var attempted, until, finished sql.NullTime
		if err := rows.Scan(&j.ID, &j.Queue, &j.Kind, &state, &j.Attempt, &j.MaxAttempts, &j.Token, &j.LockedBy,
			&j.RunAt, &attempted, &until, &finished, &j.LastError, &j.Errors); err != nil {
			return err
		}
		j.State = queue.State(state)
		j.Attempted, j.LockedUntil, j.Finished = attempted.Time, until.Time, finished.Time
		out = append(out, j)
		return nil
	})
	return out, err
}

type jobsData struct {
	Queue string
	State queue.State
	Jobs  jobRows
	Shown int
}

// jobs lists the jobs of one queue in one state, newest first.
func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q, state := r.URL.Query().Get("queue"), queue.State(r.URL.Query().Get("state"))
	switch {
	case q == "":
		http.Error(w, "the parameter queue is missing: /queue/jobs?queue=NAME&state=STATE", http.StatusBadRequest)
		return
	case !slices.Contains(queueStates, state):
		http.Error(w, fmt.Sprintf("state %.40q is not a state of a job: want one of %v", state, queueStates), http.StatusBadRequest)
		return
	}
	if s.queueUnavailable(w, r) {
		return
	}
	sqlText := queueLiveSQL
	if state == queue.StateCompleted || state == queue.StateCancelled || state == queue.StateDiscarded {
		sqlText = queueEndedSQL
	}
	d := jobsData{Queue: q, State: state, Shown: jobsShown, Jobs: jobRows{ReadOnly: s.cfg.ReadOnly}}
	var err error
	if d.Jobs.Jobs, err = s.jobLines(ctx, sqlText, q, string(state), jobsShown); err != nil {
		s.fail(w, fmt.Errorf("read the jobs: %w", err))
		return
	}
	s.renderQueue(w, r, "queuejobs", fmt.Sprintf("Queue %s: %s jobs", q, state), d)
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

// jobDetail is a job as /queue/jobs/{id} shows it.
type jobDetail struct {
	jobLine
	Priority       int
	UniqueKey      string
	Args           string
	ArgsLen        int
	ArgsCut        bool
	Created        time.Time
	Entries        []queue.AttemptError // the latest errorsShown
	EarlierEntries int                  // entries not shown
	Live, Dead     bool
	StuckNow       bool
	Ops            []jobOpLink // the changes the job's state allows
}

// jobSQL reads one job, live or finished, with its args and its errors
// bounded.
const jobSQL = `SELECT id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, locked_until, NULL::timestamptz, priority, coalesce(unique_key, ''),
	left(args::text, $2), length(args::text), created_at, jsonb_array_length(errors),
	(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]') FROM jsonb_array_elements(errors) WITH ORDINALITY AS x(e, n)
	 WHERE n > jsonb_array_length(errors) - $3), locked_until < now()
FROM aegis_job WHERE id = $1
UNION ALL
SELECT id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, NULL::timestamptz, finalized_at, priority, coalesce(unique_key, ''),
	left(args::text, $2), length(args::text), created_at, jsonb_array_length(errors),
	(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]') FROM jsonb_array_elements(errors) WITH ORDINALITY AS x(e, n)
	 WHERE n > jsonb_array_length(errors) - $3), false
FROM aegis_job_finished WHERE id = $1`

// errNoJob is a job id that names no job.
var errNoJob = errors.New("no such job")

func (s *Server) readJob(ctx context.Context, id int64) (*jobDetail, error) {
	var j jobDetail
	var state string
	var attempted, until, finished sql.NullTime
	var entries []byte
	var stuck sql.NullBool
	err := s.st.db.QueryRowContext(ctx, jobSQL, id, argsShown, errorsShown).Scan(&j.ID, &j.Queue, &j.Kind, &state,
		&j.Attempt, &j.MaxAttempts, &j.Token, &j.LockedBy, &j.RunAt, &attempted, &until, &finished,
		&j.Priority, &j.UniqueKey, &j.Args, &j.ArgsLen, &j.Created, &j.Errors, &entries, &stuck)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoJob
	}
	if err != nil {
		return nil, fmt.Errorf("read job %d: %w", id, err)
	}
	j.State = queue.State(state)
	j.Attempted, j.LockedUntil, j.Finished = attempted.Time, until.Time, finished.Time
	j.StuckNow = j.State == queue.StateRunning && stuck.Bool
	if err := json.Unmarshal(entries, &j.Entries); err != nil {
		return nil, fmt.Errorf("decode the errors of job %d: %w", id, err)
	}
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
		http.Redirect(w, r, "/queue?done="+o.done, http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/queue/jobs/"+strconv.FormatInt(id, 10)+"?done="+o.done, http.StatusSeeOther)
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
	c, err := queue.New(pool, &queue.Config{ID: "aegis console", Logger: s.log})
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
