package schedule

import (
	"context"
	"database/sql"
	"fmt"
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
// inspect): a namespace's latest runs with their expiry, and the runs stuck
// past it in every namespace. Unlike NewStore it creates and migrates
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
}

// NewRunReader returns a reader of the run table of cfg (its Table and
// Namespace, defaults as for NewStore) on db, PostgreSQL through pgx's
// stdlib driver or SQLite. It asks db which of the two it is; a nil cfg
// means defaults. Bad config is an error wrapping aegis.ErrInvalid.
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
	r := &RunReader{db: db, dialect: d, ns: c.Namespace, name: c.Table, table: table,
		latest: fmt.Sprintf(latestRunsPG, table), stuck: fmt.Sprintf(stuckRunsPG, table)}
	if d == migrate.SQLite {
		r.latest, r.stuck = fmt.Sprintf(latestRunsSQLite, table), fmt.Sprintf(stuckRunsSQLite, table)
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
