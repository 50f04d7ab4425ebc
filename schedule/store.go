package schedule

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/outcome"
)

// StoreConfig configures a Store. The zero value is valid.
type StoreConfig struct {
	// Table is the run table, optionally schema-qualified. Default
	// "aegis_schedule_run".
	Table string
	// Namespace keeps the runs of services that share the table apart: a
	// Store reads and writes only its namespace's runs. Default
	// DefaultNamespace. A Scheduler's Catalog must have the same one.
	Namespace string
}

// Store is the run table of run-key mode, in PostgreSQL or SQLite: one row
// per (job, fire time), which records node, token, attempt, start, end and
// outcome. It is safe for concurrent use; replicas share one table.
//
// The runbook reads it:
//
//	SELECT job, fire_at, state, node, token, attempt, started_at, ended_at, error
//	FROM aegis_schedule_run WHERE state = 'running' AND expires_at < now();  -- stuck, awaiting the reaper
//
// Tools read it through RunReader (aegis console, aegis inspect), which
// creates nothing.
type Store struct {
	db      *sql.DB
	dialect migrate.Dialect
	ns      string
	q       runSQL
	table   string  // quoted
	bridge  *sql.DB // db, when NewStoreFromPool opened it: Close closes it
}

// storeConfig is cfg with its defaults, checked, and its table's name
// quoted for SQL.
func storeConfig(cfg *StoreConfig) (StoreConfig, string, error) {
	var c StoreConfig
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_schedule_run")
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	if err := checkNamespace("schedule: StoreConfig.Namespace", c.Namespace); err != nil {
		return c, "", err
	}
	table, err := migrate.Table("schedule: StoreConfig.Table", c.Table)
	if err != nil {
		return c, "", invalid("%w", err)
	}
	return c, table, nil
}

// NewStore returns the run table on db (SQLite opened like
// sqlitelease.Open, or PostgreSQL through pgx's stdlib driver; a program
// with a pgx pool uses NewStoreFromPool), applying its numbered
// migrations. A nil cfg means defaults. A nil db is an error wrapping
// aegis.ErrInvalid; so is bad config, naming the field. db stays the
// caller's: the Store never closes it.
func NewStore(ctx context.Context, db *sql.DB, cfg *StoreConfig) (*Store, error) {
	if db == nil {
		return nil, invalid("schedule: NewStore: db is nil")
	}
	c, table, err := storeConfig(cfg)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(c.Table, ".")
	name := parts[len(parts)-1]
	schema := ""
	if len(parts) == 2 {
		schema = `"` + parts[0] + `".`
	}
	index := `"` + name + `_running"`
	attempts, missed := schema+`"`+name+`_attempt"`, schema+`"`+name+`_missed"`
	names := []any{table, index, `"` + name + `_pkey"`, `"` + name + `_running_ns"`, schema + index, schema + `"` + name + `_v3"`, `"` + name + `"`,
		attempts, missed, `"` + name + `_attempt"`, schema, name}
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("schedule: store: %w", err)
	}
	q := runPostgres
	if d == migrate.SQLite {
		q = runSQLite
	}
	ms := migrate.Format(q.migrations, names...)
	if err := migrate.Apply(ctx, db, d, "schedule:"+c.Table, ms); err != nil {
		return nil, fmt.Errorf("schedule: store: %w", err)
	}
	f := func(s string) string {
		if s == "" {
			return "" // a statement this dialect does not have (leader mode is PostgreSQL's)
		}
		if strings.Contains(s, "%[2]s") || strings.Contains(s, "%[3]s") {
			return fmt.Sprintf(s, table, missed, attempts)
		}
		return fmt.Sprintf(s, table)
	}
	q = runSQL{
		claim: f(q.claim), replace: f(q.replace), heartbeat: f(q.heartbeat), finish: f(q.finish), handBack: f(q.handBack),
		expired: f(q.expired), abandon: f(q.abandon), reclaim: f(q.reclaim), last: f(q.last), prune: f(q.prune), list: f(q.list),
		enqueue: f(q.enqueue), skip: f(q.skip), record: f(q.record),
		refuse: f(q.refuse), miss: f(q.miss), lastRecorded: f(q.lastRecorded), pruneAttempts: f(q.pruneAttempts), pruneMissed: f(q.pruneMissed),
		takenOver: f(q.takenOver), traced: f(q.traced), mine: f(q.mine), ended: f(q.ended),
	}
	return &Store{db: db, dialect: d, ns: c.Namespace, q: q, table: table}, nil
}

// RunRecord is one row of the run table.
type RunRecord struct {
	Job     string
	Fire    time.Time
	Token   aegis.Token
	Node    string
	Attempt int
	// State is running, succeeded, failed, skipped (overlap forbid),
	// replaced (overlap replace) or abandoned (crashed MaxAttempts times,
	// or a later tick had started); in leader mode enqueued (the leader
	// enqueued its job; no worker has recorded an outcome yet), then
	// succeeded or failed, or skipped.
	State   string
	Started time.Time
	Ended   time.Time // zero while running
	Error   string
}

// Runs returns the job's latest runs, newest first, at most limit (at
// least 1).
func (s *Store) Runs(ctx context.Context, job string, limit int) ([]RunRecord, error) {
	if limit < 1 {
		return nil, invalid("schedule: runs of %q: limit %d is not positive", job, limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q.list, job, limit, s.ns)
	if err != nil {
		return nil, fmt.Errorf("schedule: runs of %q: %w", job, err)
	}
	defer rows.Close()
	var out []RunRecord
	for rows.Next() {
		r := RunRecord{Job: job}
		var fire, started, ended, token int64
		if err := rows.Scan(&fire, &token, &r.Node, &r.Attempt, &r.State, &started, &ended, &r.Error); err != nil {
			return nil, fmt.Errorf("schedule: runs of %q: %w", job, err)
		}
		r.Fire, r.Token, r.Started = time.UnixMilli(fire).UTC(), aegis.Token(token), time.UnixMilli(started).UTC()
		if ended != 0 {
			r.Ended = time.UnixMilli(ended).UTC()
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("schedule: runs of %q: %w", job, err)
	}
	return out, nil
}

// runToken is a tick's first token: its fire time in milliseconds times a
// million, so a later tick's token is greater than an earlier tick's after
// any number (below a million) of bumps by reclaims and replacements.
func runToken(fire time.Time) aegis.Token { return aegis.Token(fire.UnixMilli()*1_000_000) + 1 }

// claim inserts the tick's run row, owned by owner. won is false when
// another node has the tick; state is "running", or "skipped" when forbid
// found a live run.
func (s *Store) claim(ctx context.Context, job string, fire time.Time, node string, ttl time.Duration, forbid bool, owner string) (token aegis.Token, state string, won bool, err error) {
	var t int64
	err = s.row(ctx, s.q.claim, []any{job, fire.UnixMilli(), int64(runToken(fire)), node, ttl.Milliseconds(), forbid, s.ns, owner}, &t, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("schedule: claim %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return aegis.Token(t), state, true, nil
}

// replace ends the job's running runs older than fire, bumping their
// tokens.
func (s *Store) replace(ctx context.Context, job string, fire time.Time) (int64, error) {
	n, err := s.exec(ctx, s.q.replace, job, fire.UnixMilli(), s.ns)
	if err != nil {
		return 0, fmt.Errorf("schedule: replace runs of %q: %w", job, err)
	}
	return n, nil
}

// finish records the outcome of a run that still has its token; ErrLost
// when it was reclaimed or replaced.
func (s *Store) finish(ctx context.Context, job string, fire time.Time, token aegis.Token, state, errText string) error {
	n, err := s.exec(ctx, s.q.finish, job, fire.UnixMilli(), int64(token), state, errText, s.ns)
	if err != nil {
		return fmt.Errorf("schedule: finish %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	if n == 0 {
		return aegis.ErrLost
	}
	return nil
}

// handBack expires a running run that still has its token, so that the
// reaper takes it at once; nil when it was not (or no longer) this run's.
func (s *Store) handBack(ctx context.Context, job string, fire time.Time, token aegis.Token) error {
	if _, err := s.exec(ctx, s.q.handBack, job, fire.UnixMilli(), int64(token), s.ns); err != nil {
		return fmt.Errorf("schedule: hand back %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// expiredRun is a running row past its expiry: the reaper's.
type expiredRun struct {
	job  string
	fire time.Time
}

// expired lists the jobs' running rows past their expiry, oldest first
// (at most 100 a call).
func (s *Store) expired(ctx context.Context, jobs []string) ([]expiredRun, error) {
	arg, err := s.jobsArg(jobs)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q.expired, arg, s.ns)
	if err != nil {
		return nil, fmt.Errorf("schedule: expired runs: %w", err)
	}
	defer rows.Close()
	var out []expiredRun
	for rows.Next() {
		var (
			r  expiredRun
			ms int64
		)
		if err := rows.Scan(&r.job, &ms); err != nil {
			return nil, err
		}
		r.fire = time.UnixMilli(ms).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// abandon ends the jobs' expired running rows as abandoned.
func (s *Store) abandon(ctx context.Context, jobs []string) (int64, error) {
	arg, err := s.jobsArg(jobs)
	if err != nil {
		return 0, err
	}
	n, err := s.exec(ctx, s.q.abandon, arg, s.ns)
	if err != nil {
		return 0, fmt.Errorf("schedule: abandon expired runs: %w", err)
	}
	return n, nil
}

// jobsArg passes a list of jobs: a text[] on PostgreSQL, a JSON array on
// SQLite (json_each).
func (s *Store) jobsArg(jobs []string) (any, error) {
	if s.dialect != migrate.SQLite {
		return jobs, nil
	}
	b, err := json.Marshal(jobs)
	return string(b), err
}

// reclaim takes over an expired run for owner, bumping its token in the
// same statement. ok is false when the run was not (or no longer)
// expired.
func (s *Store) reclaim(ctx context.Context, job string, fire time.Time, node string, ttl time.Duration, maxAttempts int, owner string) (token aegis.Token, state string, attempt int, ok bool, err error) {
	var t int64
	err = s.row(ctx, s.q.reclaim, []any{job, fire.UnixMilli(), node, ttl.Milliseconds(), maxAttempts, s.ns, owner}, &t, &state, &attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", 0, false, nil
	}
	if err != nil {
		return 0, "", 0, false, fmt.Errorf("schedule: reclaim %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return aegis.Token(t), state, attempt, true, nil
}

// mine reads the run row that a claim or reclaim of owner took, when its
// reply was lost: ok is false when it took none (it did not land, or a
// later grant took the row since).
func (s *Store) mine(ctx context.Context, job string, fire time.Time, owner string) (token aegis.Token, state string, attempt int, ok bool, err error) {
	var t int64
	err = s.db.QueryRowContext(ctx, s.q.mine, s.ns, job, fire.UnixMilli(), owner).Scan(&t, &state, &attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", 0, false, nil
	}
	if err != nil {
		return 0, "", 0, false, fmt.Errorf("schedule: read back the claim of %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return aegis.Token(t), state, attempt, true, nil
}

// ended reads the run row's token, state and error: what a finish whose
// reply was lost may have written.
func (s *Store) ended(ctx context.Context, job string, fire time.Time) (token aegis.Token, state, text string, err error) {
	var t int64
	if err := s.db.QueryRowContext(ctx, s.q.ended, s.ns, job, fire.UnixMilli()).Scan(&t, &state, &text); err != nil {
		return 0, "", "", fmt.Errorf("schedule: read back the end of %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return aegis.Token(t), state, text, nil
}

// last returns the job's latest fire time in the table, or zero.
func (s *Store) last(ctx context.Context, job string) (time.Time, error) {
	var ms sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.last, job, s.ns).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("schedule: last run of %q: %w", job, err)
	}
	if !ms.Valid {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms.Int64).UTC(), nil
}

// prune deletes the job's ended runs, ended attempts and missed ticks
// that fired before cutoff.
func (s *Store) prune(ctx context.Context, job string, cutoff time.Time) error {
	if _, err := s.exec(ctx, s.q.prune, job, cutoff.UnixMilli(), s.ns); err != nil {
		return err
	}
	if _, err := s.exec(ctx, s.q.pruneAttempts, s.ns, job, cutoff.UnixMilli()); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.q.pruneMissed, s.ns, job, cutoff.UnixMilli())
	return err
}

// lastRecorded returns the job's latest tick on record before t, run or
// missed, or zero.
func (s *Store) lastRecorded(ctx context.Context, job string, t time.Time) (time.Time, error) {
	var ms sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.lastRecorded, s.ns, job, t.UnixMilli()).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("schedule: last tick on record of %q: %w", job, err)
	}
	if !ms.Valid {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms.Int64).UTC(), nil
}

// miss records the ticks of job that have no run row (or an overlap
// forbid's skip) as missed, unless recorded already, and returns those it
// recorded.
func (s *Store) miss(ctx context.Context, job, node string, ticks []missRow) ([]MissedTick, error) {
	arg, err := json.Marshal(ticks)
	if err != nil {
		return nil, err
	}
	var out []MissedTick
	err = s.write(ctx, func(e execer) error {
		rows, err := e.QueryContext(ctx, s.q.miss, s.ns, job, node, string(arg))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m := MissedTick{Namespace: s.ns, Job: job, Node: node}
			var ms int64
			if err := rows.Scan(&ms, &m.Cause, &m.Detail); err != nil {
				return err
			}
			m.Fire = time.UnixMilli(ms).UTC()
			out = append(out, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("schedule: record missed ticks of %q: %w", job, err)
	}
	return out, nil
}

// traced records the trace id of a run's attempt.
func (s *Store) traced(ctx context.Context, job string, fire time.Time, token aegis.Token, traceID string) error {
	if _, err := s.exec(ctx, s.q.traced, s.ns, job, fire.UnixMilli(), int64(token), traceID); err != nil {
		return fmt.Errorf("schedule: record the trace of %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// refuse records the end of a run whose finish the run row refused on
// its attempt, if a later attempt took the tick while it went on (its
// attempt said lost): twice is true then.
func (s *Store) refuse(ctx context.Context, job string, fire time.Time, token aegis.Token, text string) (twice bool, err error) {
	n, err := s.exec(ctx, s.q.refuse, s.ns, job, fire.UnixMilli(), int64(token), text)
	if err != nil {
		return false, fmt.Errorf("schedule: record the refused end of %q at %s: %w", job, fire.UTC().Format(time.RFC3339Nano), err)
	}
	return n > 0, nil
}

// exec runs a write statement and returns the rows it affected. On SQLite
// it runs in BEGIN IMMEDIATE, which takes the write lock before reading:
// an INSERT … SELECT that upgraded a read lock could fail with SQLITE_BUSY
// instead of waiting.
func (s *Store) exec(ctx context.Context, stmt string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(e execer) error {
		res, err := e.ExecContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// row runs a write statement that returns at most one row.
func (s *Store) row(ctx context.Context, stmt string, args []any, dest ...any) error {
	return s.write(ctx, func(e execer) error {
		return e.QueryRowContext(ctx, stmt, args...).Scan(dest...)
	})
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Store) write(ctx context.Context, fn func(execer) error) (err error) {
	if s.dialect != migrate.SQLite {
		return fn(s.db)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err = fn(conn); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, cerr := conn.ExecContext(ctx, "COMMIT"); cerr != nil {
		return cerr
	}
	return err
}

// runRow is a run row seen as a lease, so that aegis.Keep keeps it alive
// (heartbeat every third of the TTL, context cancelled on loss or at the
// local deadline). Release is a no-op: the run's finish records the
// outcome.
type runRow struct {
	s    *Store
	job  string
	fire time.Time
}

func (r *runRow) TryAcquire(context.Context, string, time.Duration) (*aegis.Lease, error) {
	return nil, errors.New("schedule: a run row is claimed, not acquired")
}

// Renew extends the run row's expiry. A failed statement is sent again
// while ctx allows (aegis.Keep bounds it by the lease's local deadline):
// one failed heartbeat is no lost lease, and giving up would cancel a run
// that still holds its row. The renewal is idempotent: one that landed
// with its reply lost is renewed again.
func (r *runRow) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	for try := 0; ; try++ {
		start := time.Now()
		n, err := r.s.exec(ctx, r.s.q.heartbeat, r.job, r.fire.UnixMilli(), int64(l.Token), ttl.Milliseconds(), r.s.ns)
		switch {
		case err == nil && n == 0:
			return aegis.ErrLost
		case err == nil:
			l.TTL, l.Deadline = ttl, driver.LocalDeadline(start, ttl)
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("schedule: heartbeat %q: %w", r.job, err)
		}
		if !backoff.Sleep(ctx, outcome.Retry.Delay(try)) {
			return fmt.Errorf("schedule: heartbeat %q (tried %d times until the lease's deadline): %w", r.job, try+1, err)
		}
	}
}

func (r *runRow) Release(context.Context, *aegis.Lease) error { return nil }
