package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// Inspector reads the queue's tables for an operator (aegis console's
// queue pages): counts per queue and state, the last hour's throughput and
// waits, the stuck, overdue and dead jobs (Health), the jobs of a queue in
// a state, and one job with its args and errors bounded, all in database
// time. It changes nothing: the changes are Client's (RetryDead, CancelJob, DiscardDead).
//
// It reads the tables of a Config's Table (found on the connection's
// search_path when unqualified), like a Client of that Config. It is safe
// for concurrent use.
type Inspector struct {
	db   *sql.DB       // nil when made from a pool
	pool *pgxpool.Pool // nil when made from a *sql.DB
	t    tables
}

// NewInspector returns an Inspector on db (PostgreSQL through pgx's stdlib
// driver) of the tables of cfg's Table; it reads no other field of cfg. A
// nil cfg means the default table. It does no I/O. A nil db or a bad
// Table is an error wrapping aegis.ErrInvalid.
func NewInspector(db *sql.DB, cfg *Config) (*Inspector, error) {
	if db == nil {
		return nil, invalid("NewInspector: db is nil")
	}
	t, err := inspectorTables(cfg)
	if err != nil {
		return nil, err
	}
	return &Inspector{db: db, t: t}, nil
}

// NewInspectorFromPool is NewInspector on a pgx pool: a program whose
// handle is a pool needs no database/sql of its own. Each call of the
// Inspector borrows the pool through database/sql for its duration, so
// the Inspector holds nothing to close. A nil pool or a bad Table is an
// error wrapping aegis.ErrInvalid.
func NewInspectorFromPool(pool *pgxpool.Pool, cfg *Config) (*Inspector, error) {
	if pool == nil {
		return nil, invalid("NewInspectorFromPool: pool is nil")
	}
	t, err := inspectorTables(cfg)
	if err != nil {
		return nil, err
	}
	return &Inspector{pool: pool, t: t}, nil
}

func inspectorTables(cfg *Config) (tables, error) {
	var table string
	if cfg != nil {
		table = cfg.Table
	}
	return newTables("Config.Table", table)
}

// open returns the Inspector to read through for one call, and what ends
// it: i itself, or for a pool's Inspector a copy on a database/sql handle
// of the pool, closed by done (it would hold a goroutine until closed).
func (i *Inspector) open() (in *Inspector, done func()) {
	if i.pool == nil {
		return i, func() {}
	}
	db := stdlib.OpenDBFromPool(i.pool)
	return &Inspector{db: db, t: i.t}, func() { _ = db.Close() }
}

// Table is the job table the Inspector reads, as configured (Config.Table
// or DefaultTable).
func (i *Inspector) Table() string { return i.t.name }

// Missing returns the first of the queue's tables (the job table, its
// finished jobs' and its paused queues': aegis_job, aegis_job_finished,
// aegis_queue by default) that the database does not have (Migrate
// creates them), or "" when it has them all.
func (i *Inspector) Missing(ctx context.Context) (string, error) {
	i, done := i.open()
	defer done()
	for _, t := range i.t.list() {
		ok, err := migrate.Exists(ctx, i.db, migrate.Postgres, t)
		if err != nil {
			return "", fmt.Errorf("queue: %w", err)
		}
		if !ok {
			return t, nil
		}
	}
	return "", nil
}

// Summary is a queue's line of Inspector.Summary: a queue that has a job, or
// that is paused.
type Summary struct {
	Queue  string
	Paused bool
	// Counts are the jobs by state: live ones, and the finished ones the
	// queue keeps (completed ones only with Config.CompletedRetention).
	Counts map[State]int64
	// Retrying are the scheduled jobs that have run before (a retry's
	// backoff, or a snooze after an attempt); Stuck the running ones past
	// their lease (the reaper's).
	Retrying, Stuck int64
	// Completed and Dead are the jobs finished in the last hour (by
	// finalized_at): completed, and cancelled or discarded.
	Completed, Dead int64
	// Minutes are the last hour's completions per minute, the oldest
	// first (Minutes[59] is the current minute).
	Minutes [60]int64
	// Waits is how many jobs started in the last hour were measured, and
	// WaitP50 and WaitP95 the percentiles of their wait from due (run_at)
	// to start (attempted_at): the running ones and the finished ones
	// that ended while running. A start that the database's clock put
	// before its due counts as 0.
	Waits            int64
	WaitP50, WaitP95 time.Duration
}

// Summary reads every queue's line, ordered by queue name.
func (i *Inspector) Summary(ctx context.Context) ([]Summary, error) {
	i, done := i.open()
	defer done()
	at := map[string]*Summary{}
	line := func(q string) *Summary {
		if c, ok := at[q]; ok {
			return c
		}
		c := &Summary{Queue: q, Counts: map[State]int64{}}
		at[q] = c
		return c
	}
	if err := i.counts(ctx, line); err != nil {
		return nil, err
	}
	if err := i.lastHour(ctx, line); err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(at))
	for _, c := range at {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Summary) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

// counts reads the jobs per queue and state, and the paused queues.
func (i *Inspector) counts(ctx context.Context, line func(string) *Summary) error {
	if err := eachRow(ctx, i.db, i.t.sql(queueCountsSQL), nil, func(rows *sql.Rows) error {
		var q, state string
		var n, retrying, stuck int64
		if err := rows.Scan(&q, &state, &n, &retrying, &stuck); err != nil {
			return err
		}
		c := line(q)
		c.Counts[State(state)] += n
		c.Retrying += retrying
		c.Stuck += stuck
		return nil
	}); err != nil {
		return fmt.Errorf("queue: count the jobs: %w", err)
	}
	if err := eachRow(ctx, i.db, i.t.sql(queuePausedSQL), nil, func(rows *sql.Rows) error {
		var q string
		if err := rows.Scan(&q); err != nil {
			return err
		}
		line(q).Paused = true
		return nil
	}); err != nil {
		return fmt.Errorf("queue: read the paused queues: %w", err)
	}
	return nil
}

// lastHour reads the last hour's finished jobs, waits and completions per
// minute.
func (i *Inspector) lastHour(ctx context.Context, line func(string) *Summary) error {
	if err := eachRow(ctx, i.db, i.t.sql(queueHourSQL), nil, func(rows *sql.Rows) error {
		var q string
		var done, dead int64
		if err := rows.Scan(&q, &done, &dead); err != nil {
			return err
		}
		c := line(q)
		c.Completed, c.Dead = done, dead
		return nil
	}); err != nil {
		return fmt.Errorf("queue: count the last hour's jobs: %w", err)
	}
	if err := eachRow(ctx, i.db, i.t.sql(queueWaitSQL), nil, func(rows *sql.Rows) error {
		var q string
		var n int64
		var p50, p95 float64
		if err := rows.Scan(&q, &n, &p50, &p95); err != nil {
			return err
		}
		c := line(q)
		c.Waits, c.WaitP50, c.WaitP95 = n, seconds(p50), seconds(p95)
		return nil
	}); err != nil {
		return fmt.Errorf("queue: measure the last hour's waits: %w", err)
	}
	if err := eachRow(ctx, i.db, i.t.sql(queueMinutesSQL), nil, func(rows *sql.Rows) error {
		var q string
		var m int
		var n int64
		if err := rows.Scan(&q, &m, &n); err != nil {
			return err
		}
		if m >= 0 && m < 60 {
			line(q).Minutes[59-m] += n
		}
		return nil
	}); err != nil {
		return fmt.Errorf("queue: count the last hour's completions per minute: %w", err)
	}
	return nil
}

// seconds is a wait measured in seconds as a Duration.
func seconds(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }

// KeepsCompleted tells whether the finished jobs include completed ones:
// whether a client keeps them (Config.CompletedRetention).
func (i *Inspector) KeepsCompleted(ctx context.Context) (bool, error) {
	i, done := i.open()
	defer done()
	var keeps bool
	if err := i.db.QueryRowContext(ctx, i.t.sql(queueKeepsCompletedSQL)).Scan(&keeps); err != nil {
		return false, fmt.Errorf("queue: look for completed jobs: %w", err)
	}
	return keeps, nil
}

// JobSummary is a job in a list.
type JobSummary struct {
	ID          int64
	Queue, Kind string
	State       State
	Attempt     int
	MaxAttempts int
	Token       aegis.Token
	LockedBy    string // the client that holds or last held it
	RunAt       time.Time
	Attempted   time.Time // zero before the first claim
	LockedUntil time.Time // a live job's lease; zero for a finished job
	Finished    time.Time // zero for a live job
	// LastError is the first 300 characters of the latest attempt's
	// error, and Errors how many errors the job has.
	LastError string
	Errors    int
}

// Stuck reads the running jobs past their lease (database time) of queue
// ("" for every queue): their worker paused or died, and no started
// client's reaper has handed them on yet. The longest past first, at most
// limit; a limit under 1 is an error wrapping aegis.ErrInvalid.
func (i *Inspector) Stuck(ctx context.Context, queue string, limit int) ([]JobSummary, error) {
	i, done := i.open()
	defer done()
	return i.jobList(ctx, "stuck jobs", queueStuckSQL, limit, queue)
}

// Overdue reads the overdue jobs of queue ("" for every queue): jobs still
// waiting (available, or scheduled and not yet promoted) that fell due
// (run_at) more than grace ago, database time, in a queue that is not
// paused. A working queue starts an available job as soon as a worker has
// room and a started client promotes a due scheduled job within its
// ReapInterval, so a job overdue by a grace of many such rounds (the
// console's: 30s) has no worker taking it, or workers too few. The longest
// overdue first, at most limit. A negative grace or a limit under 1 is an
// error wrapping aegis.ErrInvalid.
func (i *Inspector) Overdue(ctx context.Context, queue string, grace time.Duration, limit int) ([]JobSummary, error) {
	i, done := i.open()
	defer done()
	if grace < 0 {
		return nil, invalid("Inspector.Overdue: grace %s is negative", grace)
	}
	return i.jobList(ctx, "overdue jobs", queueOverdueSQL, limit, queue, grace.Microseconds())
}

// CountLimit bounds each count of Health: a count stops at CountLimit+1,
// which reads "more than CountLimit", so that a huge backlog costs a
// bounded scan.
const CountLimit = 10000

// Health is the queue's triage at a glance (aegis console's overview),
// database time.
type Health struct {
	// Stuck are the running jobs past their lease (as Stuck).
	Stuck int64
	// Overdue are the jobs overdue by the grace (as Overdue).
	Overdue int64
	// DeadHour and DeadDay are the jobs cancelled or discarded (dead
	// letters) in the last hour and in the last 24 hours, by finalized_at.
	DeadHour, DeadDay int64
	// Oldest is each queue's oldest waiting job, the longest waiting first.
	Oldest []Waiting
}

// Waiting is a queue's oldest waiting job (available, or scheduled and
// due), with what tells whether a worker takes the queue's jobs. The queue
// keeps no table of live clients: a worker shows only through the jobs it
// holds and starts.
type Waiting struct {
	Queue string
	ID    int64
	// RunAt is when the job fell due, and Wait how long ago that was.
	RunAt time.Time
	Wait  time.Duration
	// Paused tells that the queue is paused: nobody claims its jobs.
	Paused bool
	// Leased are the queue's running jobs whose lease is current: a live
	// client renewed them within its Lease.
	Leased int64
	// LastStart is the queue's latest start (attempted_at) of a running
	// job, or of a job finished in the last hour; zero when there is none.
	LastStart time.Time
}

// Health counts the stuck, the overdue (by grace, as Overdue) and the dead
// jobs, each up to CountLimit+1, and reads the oldest waiting job of at
// most maxQueues queues. A negative grace or a maxQueues under 1 is an
// error wrapping aegis.ErrInvalid.
func (i *Inspector) Health(ctx context.Context, grace time.Duration, maxQueues int) (*Health, error) {
	i, done := i.open()
	defer done()
	switch {
	case grace < 0:
		return nil, invalid("Inspector.Health: grace %s is negative", grace)
	case maxQueues < 1:
		return nil, invalid("Inspector.Health: maxQueues %d is not positive", maxQueues)
	}
	var h Health
	if err := i.db.QueryRowContext(ctx, i.t.sql(queueHealthSQL), grace.Microseconds(), CountLimit+1).Scan(
		&h.Stuck, &h.Overdue, &h.DeadHour, &h.DeadDay); err != nil {
		return nil, fmt.Errorf("queue: count the stuck, overdue and dead jobs: %w", err)
	}
	if err := eachRow(ctx, i.db, i.t.sql(queueOldestSQL), []any{maxQueues}, func(rows *sql.Rows) error {
		var w Waiting
		var wait float64
		var last sql.NullTime
		if err := rows.Scan(&w.Queue, &w.ID, &w.RunAt, &wait, &w.Paused, &w.Leased, &last); err != nil {
			return err
		}
		w.Wait, w.LastStart = seconds(wait), last.Time
		h.Oldest = append(h.Oldest, w)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("queue: read the oldest waiting jobs: %w", err)
	}
	return &h, nil
}

// Dead reads the dead letters (cancelled and discarded jobs), the latest
// finished first, at most limit (at least 1).
func (i *Inspector) Dead(ctx context.Context, limit int) ([]JobSummary, error) {
	i, done := i.open()
	defer done()
	return i.jobList(ctx, "dead letters", queueDeadSQL, limit)
}

// Jobs reads the jobs of queue in state, the newest (greatest id) first,
// at most limit (at least 1). A state that is not one of the State
// constants is an error wrapping aegis.ErrInvalid.
func (i *Inspector) Jobs(ctx context.Context, queue string, state State, limit int) ([]JobSummary, error) {
	i, done := i.open()
	defer done()
	stmt := queueLiveSQL
	switch state {
	case StateAvailable, StateScheduled, StateRunning:
	case StateCompleted, StateCancelled, StateDiscarded:
		stmt = queueEndedSQL
	default:
		return nil, invalid("Inspector.Jobs: state %.40q is not a state of a job", state)
	}
	return i.jobList(ctx, "jobs", stmt, limit, queue, string(state))
}

// jobList reads a list of jobs: stmt's last parameter is limit, after
// args.
func (i *Inspector) jobList(ctx context.Context, what, stmt string, limit int, args ...any) ([]JobSummary, error) {
	if limit < 1 {
		return nil, invalid("Inspector: %s: limit %d is not positive", what, limit)
	}
	var out []JobSummary
	err := eachRow(ctx, i.db, i.t.sql(stmt), append(args, limit), func(rows *sql.Rows) error {
		var j JobSummary
		var state string
		var token int64
		var attempted, until, finished sql.NullTime
		if err := rows.Scan(&j.ID, &j.Queue, &j.Kind, &state, &j.Attempt, &j.MaxAttempts, &token, &j.LockedBy,
			&j.RunAt, &attempted, &until, &finished, &j.LastError, &j.Errors); err != nil {
			return err
		}
		j.State, j.Token = State(state), aegis.Token(token)
		j.Attempted, j.LockedUntil, j.Finished = attempted.Time, until.Time, finished.Time
		out = append(out, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: read the %s: %w", what, err)
	}
	return out, nil
}

// JobDetail is one job as an operator reads it, with its args and errors
// bounded.
type JobDetail struct {
	JobSummary
	Priority  int
	UniqueKey string
	// Args is the start of the args' JSON text, ArgsLen the length of the
	// whole text (longer than Args when it was cut).
	Args    string
	ArgsLen int
	Created time.Time
	// Entries are the latest of the job's errors, the oldest first.
	Entries []AttemptError
	// Stuck tells that the job is running past its lease (database time).
	Stuck bool
}

// Job reads job id, live or finished, with at most maxArgs characters of
// its args and its latest maxErrors errors (both at least 1). ErrNotFound
// when there is no such job (or it completed and was not kept).
func (i *Inspector) Job(ctx context.Context, id int64, maxArgs, maxErrors int) (*JobDetail, error) {
	i, done := i.open()
	defer done()
	if maxArgs < 1 || maxErrors < 1 {
		return nil, invalid("Inspector.Job: maxArgs %d and maxErrors %d must be positive", maxArgs, maxErrors)
	}
	var j JobDetail
	var state string
	var token int64
	var attempted, until, finished sql.NullTime
	var entries []byte
	var stuck sql.NullBool
	err := i.db.QueryRowContext(ctx, i.t.sql(jobDetailSQL), id, maxArgs, maxErrors).Scan(&j.ID, &j.Queue, &j.Kind, &state,
		&j.Attempt, &j.MaxAttempts, &token, &j.LockedBy, &j.RunAt, &attempted, &until, &finished,
		&j.Priority, &j.UniqueKey, &j.Args, &j.ArgsLen, &j.Created, &j.Errors, &entries, &stuck)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: read job %d: %w", id, err)
	}
	j.State, j.Token = State(state), aegis.Token(token)
	j.Attempted, j.LockedUntil, j.Finished = attempted.Time, until.Time, finished.Time
	j.Stuck = j.State == StateRunning && stuck.Bool
	if err := json.Unmarshal(entries, &j.Entries); err != nil {
		return nil, fmt.Errorf("queue: decode the errors of job %d: %w", id, err)
	}
	return &j, nil
}

// eachRow runs a query and calls f on each row.
func eachRow(ctx context.Context, db *sql.DB, q string, args []any, f func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q, args...)
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
