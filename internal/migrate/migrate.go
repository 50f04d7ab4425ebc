// Package migrate applies numbered schema migrations, once, to PostgreSQL or
// SQLite, safely when several processes start at the same time.
//
// Applied versions are recorded per component in aegis_migrations. Each run
// holds a lock for its whole transaction (an advisory lock on PostgreSQL, the
// write lock of BEGIN IMMEDIATE on SQLite), because concurrent
// "CREATE TABLE IF NOT EXISTS" statements can fail on PostgreSQL.
package migrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aegislab/aegis"
)

// Dialect is the SQL dialect of a database.
type Dialect int

const (
	Postgres Dialect = iota
	SQLite
)

// Migration is one numbered schema change. Versions of a component start at
// 1 and never change once released; a change is a new version.
type Migration struct {
	Version int
	SQL     string
}

// lockID is the PostgreSQL advisory lock key of migrations ("aegis" in ASCII).
const lockID = 0x6165676973

// Format returns ms with each SQL text formatted with args (fmt.Sprintf),
// such as the quoted table names a component's config chose.
func Format(ms []Migration, args ...any) []Migration {
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, SQL: fmt.Sprintf(m.SQL, args...)}
	}
	return out
}

// DefaultBusyTimeout is how long Apply waits, on SQLite, for another
// connection's write lock: the busy timeout of sqlitelease.Open.
const DefaultBusyTimeout = 5 * time.Second

// Apply applies the migrations of component that are not yet recorded, in
// version order, in one transaction. On SQLite it waits up to
// DefaultBusyTimeout for another connection's write lock (see ApplyBusy).
func Apply(ctx context.Context, db *sql.DB, d Dialect, component string, ms []Migration) error {
	return ApplyBusy(ctx, db, d, component, ms, DefaultBusyTimeout)
}

// ApplyBusy is Apply that waits up to busy, on SQLite, for the write lock
// that another connection or process holds. A connection without a busy
// timeout (a handle not opened with one) answers SQLITE_BUSY at once, where
// a migration, like every other write, should wait; so the connection's
// busy timeout is raised to busy for the migration, when it is lower, and
// put back after. When the wait runs out the error wraps the driver's
// SQLITE_BUSY. busy is ignored on PostgreSQL, whose migrations wait for
// their locks until ctx ends.
func ApplyBusy(ctx context.Context, db *sql.DB, d Dialect, component string, ms []Migration, busy time.Duration) (err error) {
	for i, m := range ms {
		if m.Version != i+1 {
			return fmt.Errorf("migrate %s: migration %d has version %d; versions must count up from 1", component, i+1, m.Version)
		}
	}
	// Up to date: nothing to write. A read-only server (a PostgreSQL hot
	// standby) refuses even CREATE TABLE IF NOT EXISTS, and its replicas
	// must still open their tables.
	var current int
	if err := db.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM aegis_migrations WHERE component = $1", component).Scan(&current); err == nil && current == len(ms) {
		return nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", component, err)
	}
	defer conn.Close()
	if d == SQLite {
		restore, err := busyAtLeast(ctx, conn, busy)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", component, err)
		}
		defer restore() // after the rollback below: deferred first, runs last
	}

	begin := "BEGIN"
	if d == SQLite {
		begin = "BEGIN IMMEDIATE" // take the write lock now: no upgrade later
	}
	defer func() {
		if err != nil {
			// Roll back even when ctx is cancelled, and when BEGIN failed
			// (a cancelled BEGIN may have begun): the connection returns to
			// the pool and must not carry an open transaction.
			Rollback(ctx, conn)
		}
	}()
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		return fmt.Errorf("migrate %s: %w", component, err)
	}
	if d == Postgres {
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", lockID); err != nil {
			return fmt.Errorf("migrate %s: lock: %w", component, err)
		}
	}
	const table = `CREATE TABLE IF NOT EXISTS aegis_migrations (
	component  text    NOT NULL,
	version    integer NOT NULL,
	PRIMARY KEY (component, version)
)`
	if _, err := conn.ExecContext(ctx, table); err != nil {
		return fmt.Errorf("migrate %s: %w", component, err)
	}
	var applied int
	row := conn.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM aegis_migrations WHERE component = $1", component)
	if err := row.Scan(&applied); err != nil {
		return fmt.Errorf("migrate %s: %w", component, err)
	}
	if applied > len(ms) {
		return fmt.Errorf("migrate %s: the database is at version %d, newer than this program's %d", component, applied, len(ms))
	}
	for _, m := range ms[applied:] {
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %s to version %d: %w", component, m.Version, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO aegis_migrations (component, version) VALUES ($1, $2)", component, m.Version); err != nil {
			return fmt.Errorf("migrate %s to version %d: %w", component, m.Version, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", component, err)
	}
	return nil
}

// busyAtLeast raises conn's SQLite busy timeout to busy when it is lower,
// and returns what puts it back.
func busyAtLeast(ctx context.Context, conn *sql.Conn, busy time.Duration) (restore func(), err error) {
	var was int64 // milliseconds
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&was); err != nil {
		return nil, fmt.Errorf("read busy_timeout: %w", err)
	}
	want := busy.Milliseconds()
	if want <= was {
		return func() {}, nil
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", want)); err != nil {
		return nil, fmt.Errorf("set busy_timeout: %w", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		// A failure leaves the longer wait on a pooled connection: harmless.
		_, _ = conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", was))
	}, nil
}

// rollbackTimeout bounds the ROLLBACK of Rollback.
const rollbackTimeout = 5 * time.Second

// Rollback ends the transaction open on conn, if any, even when ctx is
// cancelled. When the ROLLBACK fails (no transaction was open, or the
// connection is broken) the connection is discarded instead of going back
// to the pool, since nothing proves it is not still inside a transaction
// (on SQLite: holding the database's write lock); conn is then closed.
func Rollback(ctx context.Context, conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// Detect tells whether db is SQLite or PostgreSQL. It asks PostgreSQL's
// question first: a statement PostgreSQL refuses is an ERROR line in its
// server log, and the console detects on every page; SQLite keeps no log.
func Detect(ctx context.Context, db *sql.DB) (Dialect, error) {
	var v string
	pgErr := db.QueryRowContext(ctx, "SELECT version()").Scan(&v)
	if pgErr == nil && strings.HasPrefix(v, "PostgreSQL") {
		return Postgres, nil
	}
	var sv string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&sv); err == nil {
		return SQLite, nil
	}
	if pgErr != nil {
		return 0, fmt.Errorf("detect the database: %w", pgErr)
	}
	return 0, fmt.Errorf("detect the database: %q is neither PostgreSQL nor SQLite", v)
}

// Exists reports whether table (optionally schema-qualified, as Table
// takes it) is on db of dialect d: on PostgreSQL where the connection's
// search_path finds it, on SQLite in its schema (main when unqualified).
// It reads the catalog only.
func Exists(ctx context.Context, db *sql.DB, d Dialect, table string) (bool, error) {
	if _, err := Table("table", table); err != nil {
		return false, err
	}
	var ok bool
	var err error
	if d == SQLite {
		schema, name, found := strings.Cut(table, ".")
		if !found {
			schema, name = "main", table
		}
		err = db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM "`+schema+`".sqlite_master WHERE type = 'table' AND name = ?)`, name).Scan(&ok)
	} else {
		err = db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok)
	}
	if err != nil {
		return false, fmt.Errorf("look for table %s: %w", table, err)
	}
	return ok, nil
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Table checks a table name, optionally schema-qualified ("billing.lease"),
// and returns it quoted for SQL. An error names the config field and wraps
// aegis.ErrInvalid: a bad name is the caller's mistake.
func Table(field, name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%s: %w: %q has more than one dot", field, aegis.ErrInvalid, name)
	}
	for i, p := range parts {
		if !identifier.MatchString(p) {
			return "", fmt.Errorf("%s: %w: %q is not a valid table name (letters, digits and _, at most 63, optionally schema.table)", field, aegis.ErrInvalid, name)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}
