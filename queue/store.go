package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aegislab/aegis"
)

// querier is a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// db is what the client sends its statements through: its pool, or in
// tests a pool whose statements fail on purpose (internal/testing/failpoint).
type db interface {
	querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// custom makes pgx plan a statement for its arguments every time (an
// unnamed prepared statement) rather than reuse a cached one, whose plan
// PostgreSQL makes generic after five runs. The reaper and the promoter,
// which run once a second, use it. The hot statements keep pgx's statement
// cache, which is faster (a claim ~20%): they reach their rows through the
// primary key or the claim index whatever the plan and the statistics
// (sql.go; TestPlansIgnoreStaleStatistics checks custom and generic plans).
const custom = pgx.QueryExecModeExec

// statements runs the package's SQL. Every write after a claim is fenced
// by the claim's token and reports whether it landed.
type statements struct {
	t            tables
	lease        int64 // µs
	by           string
	complete     string
	completeMany string
	insertPlain  string
	insertUnique string
}

func newStatements(cfg Config) statements {
	s := statements{
		t:            cfg.tables,
		lease:        cfg.Lease.Microseconds(),
		by:           cfg.ID,
		complete:     cfg.tables.sql(completeSQL),
		completeMany: cfg.tables.sql(completeManySQL),
		insertPlain:  cfg.tables.sql(fmt.Sprintf(insertSQL, "")),
		insertUnique: cfg.tables.sql(fmt.Sprintf(insertSQL, onConflictUnique)),
	}
	if cfg.CompletedRetention > 0 {
		s.complete, s.completeMany = cfg.tables.sql(completeKeepSQL), cfg.tables.sql(completeKeepManySQL)
	}
	return s
}

// claim claims up to n available jobs of queue, marking them with the
// claim's id.
func (s statements) claim(ctx context.Context, q querier, queue string, n int, id string) ([]*JobRow, error) {
	rows, err := q.Query(ctx, s.t.sql(claimSQL), queue, n, s.lease, s.by, id)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", translate(err))
	}
	return s.claimed(rows, queue, "claim")
}

// adopt returns the jobs that the claim id of this client holds (its
// reply was lost).
func (s statements) adopt(ctx context.Context, q querier, queue, id string) ([]*JobRow, error) {
	rows, err := q.Query(ctx, s.t.sql(adoptSQL), s.by, id)
	if err != nil {
		return nil, fmt.Errorf("find the jobs of a claim whose reply was lost: %w", translate(err))
	}
	return s.claimed(rows, queue, "find the jobs of a claim whose reply was lost")
}

// claimed scans the jobs of a claim of queue (claimColumns), in the
// claim's order. The destinations are set up once for every row.
func (s statements) claimed(rows pgx.Rows, queue, op string) ([]*JobRow, error) {
	defer rows.Close()
	var (
		jobs   []*JobRow
		j      JobRow
		x      scanned
		parent *string
	)
	dest := []any{&j.ID, &j.Kind, &j.EncodedArgs, &x.priority, &j.RunAt, &j.Attempt, &j.MaxAttempts, &x.token,
		&x.errs, &x.uniqueKey, &j.CreatedAt, &x.attemptedAt, &parent}
	for rows.Next() {
		j = JobRow{}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("%s: %w", op, translate(err))
		}
		row := j
		row.Queue, row.State, row.LockedBy = queue, StateRunning, s.by
		if parent != nil {
			row.traceparent = *parent
		}
		if err := x.fill(&row); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		jobs = append(jobs, &row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, translate(err))
	}
	// Start them in the claim's order.
	slices.SortFunc(jobs, func(a, b *JobRow) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
	return jobs, nil
}

// heartbeat extends the leases of the claims (ids, tokens). It returns,
// per claim in the order given, nil when the lease was extended,
// errRowLocked when the row was locked by another statement and the claim
// still matches it (to be renewed next round), or a stale error (wrapping
// aegis.ErrStale) when the claim's token is no longer the job's.
func (s statements) heartbeat(ctx context.Context, q querier, ids, tokens []int64) ([]error, error) {
	renewed, err := s.ids(ctx, q, "heartbeat", s.t.sql(heartbeatSQL), ids, tokens, s.lease)
	if err != nil {
		return nil, err
	}
	res := make([]error, len(ids))
	if len(renewed) == len(ids) {
		return res, nil
	}
	var mids, mtokens []int64
	for i, id := range ids {
		if !renewed[id] {
			mids, mtokens = append(mids, id), append(mtokens, tokens[i])
		}
	}
	held, err := s.ids(ctx, q, "heartbeat", s.t.sql(stillHeldSQL), mids, mtokens)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		switch {
		case renewed[id]:
		case held[id]:
			res[i] = errRowLocked
		default:
			res[i] = stale("heartbeat", id, tokens[i])
		}
	}
	return res, nil
}

// errRowLocked: a heartbeat skipped a row another statement had locked
// (this client's batched completion, or a takeover in flight); the claim
// still matched the row.
var errRowLocked = errors.New("queue: heartbeat skipped a locked row")

// completeOne completes one claim: nil, or a stale error when the fence
// refused it.
func (s statements) completeOne(ctx context.Context, q querier, id, token int64) error {
	tag, err := q.Exec(ctx, s.complete, id, token)
	if err != nil {
		return fmt.Errorf("complete job %d: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return stale("complete", id, token)
	}
	return nil
}

// completeBatch completes the claims (ids, tokens); per claim, nil or a
// stale error.
func (s statements) completeBatch(ctx context.Context, q querier, ids, tokens []int64) ([]error, error) {
	done, err := s.ids(ctx, q, "complete", s.completeMany, ids, tokens)
	if err != nil {
		return nil, err
	}
	return landed("complete", ids, tokens, done), nil
}

// landed turns the ids a batch statement returned into a result per
// claim: nil, or a stale error for a claim whose row it did not return.
func landed(op string, ids, tokens []int64, got map[int64]bool) []error {
	res := make([]error, len(ids))
	for i, id := range ids {
		if !got[id] {
			res[i] = stale(op, id, tokens[i])
		}
	}
	return res
}

func (s statements) ids(ctx context.Context, q querier, op, sql string, ids, tokens []int64, args ...any) (map[int64]bool, error) {
	rows, err := q.Query(ctx, sql, append([]any{ids, tokens}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, translate(err))
	}
	got := make(map[int64]bool, len(ids))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		got[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, translate(err))
	}
	return got, nil
}

// retry hands a failed claim back to run after delay: nil, or a stale
// error.
func (s statements) retry(ctx context.Context, q querier, id, token int64, delay time.Duration, msg string) error {
	return s.one(ctx, q, "retry", s.t.sql(retrySQL), id, token, delay.Microseconds(), msg)
}

// snooze hands a claim back to run after delay, not counting the attempt:
// nil, or a stale error.
func (s statements) snooze(ctx context.Context, q querier, id, token int64, delay time.Duration) error {
	return s.one(ctx, q, "snooze", s.t.sql(snoozeSQL), id, token, delay.Microseconds())
}

// finish moves a claim to the dead letters as cancelled or discarded:
// nil, or a stale error.
func (s statements) finish(ctx context.Context, q querier, id, token int64, state State, msg string) error {
	op := map[State]string{StateCancelled: "cancel", StateDiscarded: "discard"}[state]
	tag, err := q.Exec(ctx, s.t.sql(finishSQL), id, token, string(state), msg)
	if err != nil {
		return fmt.Errorf("%s job %d: %w", op, id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return stale(op, id, token)
	}
	return nil
}

// one runs a fenced statement that returns a row when it landed.
func (s statements) one(ctx context.Context, q querier, op, sql string, id, token int64, args ...any) error {
	var ignored bool
	err := q.QueryRow(ctx, sql, append([]any{id, token}, args...)...).Scan(&ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		return stale(op, id, token)
	}
	if err != nil {
		return fmt.Errorf("%s job %d: %w", op, id, translate(err))
	}
	return nil
}

// handBack gives leases back (shutdown); per claim, nil or a stale error.
func (s statements) handBack(ctx context.Context, q querier, ids, tokens []int64) ([]error, error) {
	got, err := s.ids(ctx, q, "hand back", s.t.sql(handBackSQL), ids, tokens, "handed back: the client stopped before the handler returned")
	if err != nil {
		return nil, err
	}
	return landed("hand back", ids, tokens, got), nil
}

// reap reclaims up to limit expired leases; it returns the jobs made
// available again and the ones discarded (no attempts left).
func (s statements) reap(ctx context.Context, q querier, limit int) (reclaimed []reaped, err error) {
	rows, err := q.Query(ctx, s.t.sql(reapSQL), custom, limit)
	if err != nil {
		return nil, fmt.Errorf("reap: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var r reaped
		var ignored bool
		if err := rows.Scan(&r.id, &r.queue, &r.available, &ignored); err != nil {
			return nil, fmt.Errorf("reap: %w", err)
		}
		reclaimed = append(reclaimed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reap: %w", translate(err))
	}
	return reclaimed, nil
}

type reaped struct {
	id        int64
	queue     string
	available bool // false: discarded
}

// promote makes up to limit due scheduled jobs available.
func (s statements) promote(ctx context.Context, q querier, limit int) (int, error) {
	rows, err := q.Query(ctx, s.t.sql(promoteSQL), custom, limit)
	if err != nil {
		return 0, fmt.Errorf("promote: %w", translate(err))
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("promote: %w", translate(err))
	}
	return n, nil
}

// nextScheduled is how long until the next scheduled job is due; ok is
// false when none is scheduled.
func (s statements) nextScheduled(ctx context.Context, q querier) (d time.Duration, ok bool, err error) {
	var us *int64
	if err := q.QueryRow(ctx, s.t.sql(nextScheduledSQL)).Scan(&us); err != nil {
		return 0, false, fmt.Errorf("next scheduled: %w", translate(err))
	}
	if us == nil {
		return 0, false, nil
	}
	return time.Duration(*us) * time.Microsecond, true, nil
}

// staleError is a fenced write the database refused: the claim's token is
// no longer the job's (the reaper reclaimed the job, an operator cancelled
// it, Stop handed it back, or the claim already finished it). It wraps
// aegis.ErrStale.
type staleError struct {
	op    string
	id    int64
	token int64
}

func stale(op string, id, token int64) error { return &staleError{op: op, id: id, token: token} }

func (e *staleError) Error() string {
	return fmt.Sprintf("queue: %s job %d with token %d refused: %v (the job's token moved on: it was reclaimed, cancelled, handed back or finished since this claim)",
		e.op, e.id, e.token, aegis.ErrStale)
}

func (e *staleError) Unwrap() error { return aegis.ErrStale }

// scanner is pgx.Row or pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanned holds the columns of a job's row that are scanned into other
// types than JobRow's, or may be NULL.
type scanned struct {
	priority    int16
	token       int64
	uniqueKey   *string
	attemptedAt *time.Time
	errs        []byte
}

// fill sets j's fields from x.
func (x *scanned) fill(j *JobRow) error {
	j.Priority = int(x.priority)
	j.Token = aegis.Token(x.token)
	if x.uniqueKey != nil {
		j.UniqueKey = *x.uniqueKey
	}
	if x.attemptedAt != nil {
		j.AttemptedAt = *x.attemptedAt
	}
	if len(x.errs) > 2 { // not "[]"
		if err := json.Unmarshal(x.errs, &j.Errors); err != nil {
			return fmt.Errorf("decode the errors of job %d: %w", j.ID, err)
		}
	}
	return nil
}

// scanJob scans jobColumns, and finalized_at when finished is true.
func scanJob(row scanner, finished bool) (*JobRow, error) {
	var (
		j        JobRow
		x        scanned
		state    string
		lockedBy *string
		final    *time.Time
	)
	dest := []any{&j.ID, &j.Queue, &j.Kind, &j.EncodedArgs, &x.priority, &j.RunAt, &state, &j.Attempt, &j.MaxAttempts,
		&x.token, &lockedBy, &x.errs, &x.uniqueKey, &j.CreatedAt, &x.attemptedAt}
	if finished {
		dest = append(dest, &final)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, translate(err)
	}
	j.State = State(state)
	if lockedBy != nil {
		j.LockedBy = *lockedBy
	}
	if final != nil {
		j.FinalizedAt = *final
	}
	if err := x.fill(&j); err != nil {
		return nil, err
	}
	return &j, nil
}

// translate makes a missing table, or a missing column of a table an
// older version created, an error that says what to do.
func translate(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case !errors.As(err, &pgErr):
	case pgErr.Code == "42P01": // undefined_table
		return fmt.Errorf("%w (run queue.Migrate, or Client.Migrate for a Config.Table, first: the queue's tables are missing)", err)
	case pgErr.Code == "42703": // undefined_column
		return fmt.Errorf("%w (run queue.Migrate, or Client.Migrate for a Config.Table, to upgrade the queue's tables: an older version created them)", err)
	}
	return err
}
