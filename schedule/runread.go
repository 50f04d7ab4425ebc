package schedule

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// The operator's reads of the run table (RunReader). %[1]s is the quoted
// table. They read the columns as stored: on PostgreSQL the timestamps, on
// SQLite the milliseconds.
const (
	// latestRunsPG reads a namespace's latest runs, of one job ($2) or of
	// every job ($2 = ''), newest fire first.
	latestRunsPG = `SELECT job, fire_at, token, node, attempt, state, started_at, ended_at, expires_at, coalesce(error, '')
		FROM %[1]s WHERE namespace = $1 AND ($2 = '' OR job = $2) ORDER BY fire_at DESC, job LIMIT $3`
	latestRunsSQLite = `SELECT job, fire_ms, token, node, attempt, state, started_ms, ended_ms, expires_ms, coalesce(error, '')
		FROM %[1]s WHERE namespace = ?1 AND (?2 = '' OR job = ?2) ORDER BY fire_ms DESC, job LIMIT ?3`

	// stuckRunsPG reads, in every namespace, the runs still running past
	// their expiry (a crashed winner, which a reaper retries with a greater
	// token) that started more than $1 milliseconds ago, the latest
	// started first.
	stuckRunsPG = `SELECT namespace, job, fire_at, node, token, attempt, started_at, expires_at
FROM %[1]s
WHERE state = 'running' AND expires_at < now()
  AND started_at < now() - $1 * interval '1 millisecond'
ORDER BY started_at DESC
LIMIT $2`
	stuckRunsSQLite = `SELECT namespace, job, fire_ms, node, token, attempt, started_ms, expires_ms
FROM %[1]s
WHERE state = 'running' AND expires_ms < ` + sqliteNow + `
  AND started_ms < ` + sqliteNow + ` - ?1
ORDER BY started_ms DESC
LIMIT ?2`
)

// RunReader reads the run table for an operator (aegis console, aegis
// inspect): a namespace's latest runs with their expiry, the runs stuck
// past it in every namespace, the attempt history and the missed ticks,
// and their triage (Counts, FindAttempts, Health). Unlike NewStore it creates and migrates
// nothing, so it may be pointed at a database that does not use run-key
// mode: Exists tells whether the table is there, and the reads fail while
// it is not. It is safe for concurrent use.
type RunReader struct {
	db      *sql.DB
	dialect migrate.Dialect
	ns      string
	name    string // as configured
	table   string // quoted
	latest  string
	stuck   string
	// The attempt history's and the missed ticks' reads.
	attempts, missed string
	// The triage's statements; on SQLite, unhinted are those without the
	// partial index's hint, twiceIndex asks whether the index twiceName
	// is there.
	triage, unhinted      triage
	twiceIndex, twiceName string
	bridge                *sql.DB // db, when NewRunReaderFromPool opened it: Close closes it
}

// NewRunReader returns a reader of the run table of cfg (its Table and
// Namespace, defaults as for NewStore) on db, PostgreSQL through pgx's
// stdlib driver or SQLite (a program with a pgx pool uses
// NewRunReaderFromPool). It asks db which of the two it is; a nil cfg
// means defaults. A nil db or bad config is an error wrapping
// aegis.ErrInvalid. db stays the caller's: the reader never closes it.
func NewRunReader(ctx context.Context, db *sql.DB, cfg *StoreConfig) (*RunReader, error) {
	if db == nil {
		return nil, invalid("schedule: NewRunReader: db is nil")
	}
	c, table, err := storeConfig(cfg)
	if err != nil {
		return nil, err
	}
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("schedule: run reader: %w", err)
	}
	an, mn := historyTables(c.Table)
	at, _ := migrate.Table("schedule: the attempt table", an)
	mt, _ := migrate.Table("schedule: the missed table", mn)
	r := &RunReader{db: db, dialect: d, ns: c.Namespace, name: c.Table, table: table,
		latest: fmt.Sprintf(latestRunsPG, table), stuck: fmt.Sprintf(stuckRunsPG, table),
		attempts: fmt.Sprintf(attemptsPG, at), missed: fmt.Sprintf(missedPG, mt), triage: newTriage(d, at, mt, "")}
	if d == migrate.SQLite {
		r.latest, r.stuck = fmt.Sprintf(latestRunsSQLite, table), fmt.Sprintf(stuckRunsSQLite, table)
		r.attempts, r.missed = fmt.Sprintf(attemptsSQLite, at), fmt.Sprintf(missedSQLite, mt)
		// The index of migration 16, in the attempt table's schema.
		parts := strings.Split(c.Table, ".")
		r.twiceName = parts[len(parts)-1] + "_attempt_twice"
		r.twiceIndex = `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`
		if len(parts) == 2 {
			r.twiceIndex = `SELECT count(*) FROM "` + parts[0] + `".sqlite_master WHERE type = 'index' AND name = ?`
		}
		r.triage, r.unhinted = newTriage(d, at, mt, `INDEXED BY "`+r.twiceName+`"`), r.triage
	}
	return r, nil
}

// Table is the run table's name, as configured.
func (r *RunReader) Table() string { return r.name }

// Exists tells whether the run table is there.
func (r *RunReader) Exists(ctx context.Context) (bool, error) {
	ok, err := migrate.Exists(ctx, r.db, r.dialect, r.name)
	if err != nil {
		return false, fmt.Errorf("schedule: %w", err)
	}
	return ok, nil
}

// RunStatus is a row of the run table as an operator reads it: the run's
// record, its namespace, and Expires, when its lease runs out (a running
// run past it is stuck: the reaper's, which retries it with a greater
// token). On PostgreSQL the times are the column's, to the microsecond; on
// SQLite to the millisecond.
type RunStatus struct {
	Namespace string
	RunRecord
	Expires time.Time
}

// Latest returns the namespace's latest runs of job, or of every job when
// job is "", newest fire time first (then by job), at most limit (at least
// 1).
func (r *RunReader) Latest(ctx context.Context, job string, limit int) ([]RunStatus, error) {
	if limit < 1 {
		return nil, invalid("schedule: latest runs: limit %d is not positive", limit)
	}
	rows, err := r.db.QueryContext(ctx, r.latest, r.ns, job, limit)
	if err != nil {
		return nil, fmt.Errorf("schedule: read the run table: %w", err)
	}
	defer rows.Close()
	var out []RunStatus
	for rows.Next() {
		s := RunStatus{Namespace: r.ns}
		var token int64
		if r.dialect == migrate.SQLite {
			var fire, started, expires int64
			var ended sql.NullInt64
			if err := rows.Scan(&s.Job, &fire, &token, &s.Node, &s.Attempt, &s.State, &started, &ended, &expires, &s.Error); err != nil {
				return nil, fmt.Errorf("schedule: read the run table: %w", err)
			}
			s.Fire, s.Started, s.Expires = time.UnixMilli(fire), time.UnixMilli(started), time.UnixMilli(expires)
			if ended.Valid {
				s.Ended = time.UnixMilli(ended.Int64)
			}
		} else {
			var ended sql.NullTime
			if err := rows.Scan(&s.Job, &s.Fire, &token, &s.Node, &s.Attempt, &s.State, &s.Started, &ended, &s.Expires, &s.Error); err != nil {
				return nil, fmt.Errorf("schedule: read the run table: %w", err)
			}
			s.Ended = ended.Time
		}
		s.Token = aegis.Token(token)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("schedule: read the run table: %w", err)
	}
	return out, nil
}

// Stuck returns the runs of every namespace that are still running past
// their expiry and started more than olderThan ago (not negative), the
// latest started first, at most limit (at least 1), by the store's clock.
// Their Ended and Error are empty.
func (r *RunReader) Stuck(ctx context.Context, olderThan time.Duration, limit int) ([]RunStatus, error) {
	switch {
	case olderThan < 0:
		return nil, invalid("schedule: stuck runs: olderThan %s is negative", olderThan)
	case limit < 1:
		return nil, invalid("schedule: stuck runs: limit %d is not positive", limit)
	}
	rows, err := r.db.QueryContext(ctx, r.stuck, olderThan.Milliseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("schedule: read the stuck runs: %w", err)
	}
	defer rows.Close()
	var out []RunStatus
	for rows.Next() {
		var s RunStatus
		var token int64
		if r.dialect == migrate.SQLite {
			var fire, started, expires int64
			if err := rows.Scan(&s.Namespace, &s.Job, &fire, &s.Node, &token, &s.Attempt, &started, &expires); err != nil {
				return nil, fmt.Errorf("schedule: read the stuck runs: %w", err)
			}
			s.Fire, s.Started, s.Expires = time.UnixMilli(fire), time.UnixMilli(started), time.UnixMilli(expires)
		} else if err := rows.Scan(&s.Namespace, &s.Job, &s.Fire, &s.Node, &token, &s.Attempt, &s.Started, &s.Expires); err != nil {
			return nil, fmt.Errorf("schedule: read the stuck runs: %w", err)
		}
		s.Token, s.State = aegis.Token(token), "running"
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("schedule: read the stuck runs: %w", err)
	}
	return out, nil
}

// The reads of the attempt history and the missed ticks. %[1]s is the
// quoted attempt (or missed) table.
const (
	attemptsPG = `SELECT job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, coalesce(error, ''), coalesce(trace_id, '')
		FROM %[1]s WHERE namespace = $1 AND ($2 = '' OR job = $2) ORDER BY fire_at DESC, job, token DESC LIMIT $3`
	attemptsSQLite = `SELECT job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, coalesce(error, ''), coalesce(trace_id, '')
		FROM %[1]s WHERE namespace = ?1 AND (?2 = '' OR job = ?2) ORDER BY fire_ms DESC, job, token DESC LIMIT ?3`
	missedPG = `SELECT job, fire_at, cause, detail, node, recorded_at
		FROM %[1]s WHERE namespace = $1 AND ($2 = '' OR job = $2) ORDER BY fire_at DESC, job LIMIT $3`
	missedSQLite = `SELECT job, fire_ms, cause, detail, node, recorded_ms
		FROM %[1]s WHERE namespace = ?1 AND (?2 = '' OR job = ?2) ORDER BY fire_ms DESC, job LIMIT ?3`
)

// Attempt is one attempt of a tick, from the attempt history: the claim
// (attempt 1), each reclaim of a crashed or paused run (attempt 2, 3, …),
// in leader mode the leader's enqueue (attempt 0) and each worker's
// outcome. Written by the database in the transaction of every write of
// the run row, so that no attempt is overwritten by the next.
type Attempt struct {
	Namespace string
	Job       string
	Fire      time.Time
	Token     aegis.Token // the attempt's, as claimed
	Attempt   int
	Node      string
	// Outcome is running, succeeded, failed, skipped (overlap forbid),
	// replaced, abandoned, enqueued (leader mode), lost (lease lost: a
	// later attempt took the tick while this one was running, its run row
	// had expired) or refused (refused by the fence: a lost attempt that
	// ran to its end, whose outcome write the store refused; its tick ran
	// twice, and was applied once; Error says how it ended).
	Outcome string
	Claimed time.Time // the claim, which starts the run
	Ended   time.Time // zero while running
	Error   string
	// TraceID is the OpenTelemetry trace id (hex) of the attempt's run
	// when its scheduler traced it (Config.TracerProvider), else "".
	TraceID string
}

// MissedTick is a tick no replica started by its starting deadline, as
// the first replica to see it recorded it.
type MissedTick struct {
	Namespace string
	Job       string
	Fire      time.Time
	Cause     MissCause
	Detail    string
	Node      string    // the replica that recorded it
	Recorded  time.Time // when
}

// historyTables are the names of the run table's attempt and missed
// tables.
func historyTables(name string) (attempts, missed string) {
	parts := strings.Split(name, ".")
	parts[len(parts)-1] += "_attempt"
	attempts = strings.Join(parts, ".")
	parts[len(parts)-1] = strings.TrimSuffix(parts[len(parts)-1], "_attempt") + "_missed"
	return attempts, strings.Join(parts, ".")
}

// Attempts returns the namespace's latest attempts of job, or of every
// job when job is "", newest tick first, then by job and newest attempt,
// at most limit (at least 1).
func (r *RunReader) Attempts(ctx context.Context, job string, limit int) ([]Attempt, error) {
	if limit < 1 {
		return nil, invalid("schedule: attempts: limit %d is not positive", limit)
	}
	rows, err := r.db.QueryContext(ctx, r.attempts, r.ns, job, limit)
	if err != nil {
		return nil, fmt.Errorf("schedule: read the attempt history: %w", err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		a, err := r.scanAttempt(rows)
		if err != nil {
			return nil, fmt.Errorf("schedule: read the attempt history: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("schedule: read the attempt history: %w", err)
	}
	return out, nil
}

// scanAttempt reads a row of the attempt history, its columns as
// attemptsPG's (or attemptsSQLite's) in order, then the columns of extra.
func (r *RunReader) scanAttempt(rows *sql.Rows, extra ...any) (Attempt, error) {
	a := Attempt{Namespace: r.ns}
	var token int64
	if r.dialect == migrate.SQLite {
		var fire, claimed int64
		var ended sql.NullInt64
		if err := rows.Scan(append([]any{&a.Job, &fire, &token, &a.Attempt, &a.Node, &a.Outcome, &claimed, &ended, &a.Error, &a.TraceID}, extra...)...); err != nil {
			return a, err
		}
		a.Fire, a.Claimed = time.UnixMilli(fire), time.UnixMilli(claimed)
		if ended.Valid {
			a.Ended = time.UnixMilli(ended.Int64)
		}
	} else {
		var ended sql.NullTime
		if err := rows.Scan(append([]any{&a.Job, &a.Fire, &token, &a.Attempt, &a.Node, &a.Outcome, &a.Claimed, &ended, &a.Error, &a.TraceID}, extra...)...); err != nil {
			return a, err
		}
		a.Ended = ended.Time
	}
	a.Token = aegis.Token(token)
	return a, nil
}

// Missed returns the namespace's latest missed ticks of job, or of every
// job when job is "", newest first, at most limit (at least 1).
func (r *RunReader) Missed(ctx context.Context, job string, limit int) ([]MissedTick, error) {
	if limit < 1 {
		return nil, invalid("schedule: missed ticks: limit %d is not positive", limit)
	}
	rows, err := r.db.QueryContext(ctx, r.missed, r.ns, job, limit)
	if err != nil {
		return nil, fmt.Errorf("schedule: read the missed ticks: %w", err)
	}
	defer rows.Close()
	var out []MissedTick
	for rows.Next() {
		m := MissedTick{Namespace: r.ns}
		if r.dialect == migrate.SQLite {
			var fire, rec int64
			if err := rows.Scan(&m.Job, &fire, &m.Cause, &m.Detail, &m.Node, &rec); err != nil {
				return nil, fmt.Errorf("schedule: read the missed ticks: %w", err)
			}
			m.Fire, m.Recorded = time.UnixMilli(fire), time.UnixMilli(rec)
		} else if err := rows.Scan(&m.Job, &m.Fire, &m.Cause, &m.Detail, &m.Node, &m.Recorded); err != nil {
			return nil, fmt.Errorf("schedule: read the missed ticks: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("schedule: read the missed ticks: %w", err)
	}
	return out, nil
}
