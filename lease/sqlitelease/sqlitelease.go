// Package sqlitelease is an aegis.Locker on a SQLite lease table: the
// embedded default, for several processes on one host.
//
// It has pglease's semantics: a key is one row that is never deleted, the
// grant increments the token in the same statement, renew and release
// compare owner and token. Every operation runs in a BEGIN IMMEDIATE
// transaction, which takes SQLite's write lock before reading, so two
// processes never both see a key as free; a busy database is waited for
// (Config.BusyTimeout), not failed.
//
// Guarantees: on one host, at most one live grant per key across every
// process that opens the same database file, and strictly increasing tokens.
// Expiry reads the host's wall clock inside SQLite: a clock stepped forward
// (NTP) ends leases early, one stepped back lengthens them; the fence is what
// makes an early expiry harmless. The database file must be on a local disk:
// SQLite's locking is not reliable on network file systems. It does not
// coordinate separate hosts.
//
// Waiting: [aegis.Acquire] waits in the key's queue (Locker implements
// [aegis.Waiter]), a second table beside the lease table, so a holder that
// releases and asks again at once goes behind the waiters instead of
// starving them; a waiter that crashes holds up a free key for at most a
// second. SQLite has no notifications, so a waiter polls, every 2ms to 50ms.
// TryAcquire refuses a key that waiters are queued for (ErrHeld), which it
// learns from the key's own row.
//
// Open opens a database with the settings this package expects (WAL, a busy
// timeout, synchronous=FULL so that a token, once granted, survives a power
// loss).
//
// Operators: each grant writes a holder name (Config.Holder, "host/pid" by
// default) beside its owner, so that a console can show who holds a key
// without the owner id, which stays a secret. With Config.History, each
// grant also records (key, token, holder, time) in a history table and
// trims the key's grants beyond the last History, in the grant's
// transaction. It is off by default: it adds two writes to every grant.
package sqlitelease

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite" // the pure-Go driver, registered as "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/rowlease"
)

var (
	_ aegis.Locker = (*Locker)(nil)
	_ aegis.Waiter = (*Locker)(nil)
)

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Table is the lease table. Default "aegis_lease". The waiter queue is
	// the table of the same name with "_waiter" appended, so the name is at
	// most 56 characters.
	Table string
	// BusyTimeout is how long an operation, and the migration of New and
	// Migrate, waits for another connection's or process's write
	// transaction to end, whatever busy timeout db was opened with.
	// Default 5s.
	BusyTimeout time.Duration
	// Holder names this process for operators: every grant writes it
	// beside the grant's owner (the owner id stays a secret the console
	// never reads). Renew keeps it, and so does Release: a free key's row
	// says who held it last. Default "host/pid" (os.Hostname and
	// os.Getpid); at most 255 bytes of UTF-8 without control characters.
	Holder string
	// History, when positive, keeps the last History grants of each key
	// (token, holder, granted at) in the table named Table with "_grant"
	// appended, created by New or Migrate. Each grant then inserts a row
	// and deletes the one that falls off, in the grant's transaction.
	// Default 0: off, because it adds two statements to every grant (see
	// docs/decisions.md). At most 1000. Lockers of one table may differ:
	// the history then has gaps where a Locker without it granted.
	History int
	// SkipMigrate stops New from creating or upgrading the tables: the
	// caller ran Migrate first, with a context of its own. New then does
	// no I/O, and a missing table shows at the first operation. Default
	// false: New migrates.
	SkipMigrate bool
}

// Locker is a SQLite lease table. It is safe for concurrent use, and
// separate processes may each have one on the same database file.
type Locker struct {
	rows rowlease.Locker
}

// Open opens (creating when missing) the SQLite database at path with WAL
// journaling, a 5s busy timeout, synchronous=FULL and foreign keys on.
//
// It connects once before returning: the first connection to a new
// database switches it to WAL, which needs the database to itself, and
// when several processes create it at the same moment SQLite answers all
// but one with SQLITE_BUSY at once (a deadlock it will not wait out). Open
// retries that for up to 5s.
//
// The pool is capped at 4 open connections (db.SetMaxOpenConns raises it).
// SQLite has one writer at a time: more connections only wait for its write
// lock in the busy handler, whose sleeps grow to 100ms, a convoy in which a
// released lock sits idle; database/sql's queue hands a freed connection to
// the next caller at once. Three scheduler replicas, each with its own
// handle, claiming 1,000 schedules at the same instant left 6,896 of 10,000
// ticks unrun without the cap (BenchmarkCatalogThousand/sqlite), none with
// it.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlitelease: %w: database path is empty", aegis.ErrInvalid)
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqlitelease: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxOpenConns)
	stop := time.Now().Add(5 * time.Second)
	for attempt := 0; ; attempt++ {
		err = db.Ping()
		if err == nil {
			return db, nil
		}
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_BUSY || time.Now().After(stop) {
			db.Close()
			return nil, fmt.Errorf("sqlitelease: open %s: %w", path, err)
		}
		time.Sleep(openRetry.Delay(attempt))
	}
}

// DSN is the data source name Open opens path with, for driver "sqlite"
// (modernc.org/sqlite): for a program that opens the database through a
// connector or driver wrapper of its own (tracing, metrics, tests). It
// does not connect, retry or cap the pool as Open does.
func DSN(path string) string {
	q := url.Values{}
	// busy_timeout first: it applies to the statements after it.
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(ON)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	// The path is escaped: a '?', '#' or '%' in it would otherwise end the
	// file name in the URI, silently opening another file.
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// maxOpenConns is Open's cap on the pool (see Open).
const maxOpenConns = 4

// openRetry spaces the attempts of Open on a database another process is
// creating.
var openRetry = backoff.Backoff{Min: time.Millisecond, Max: 100 * time.Millisecond}

// migrateTimeout bounds the table creation that New runs.
const migrateTimeout = 30 * time.Second

// New returns a Locker on db, creating the lease table when it is missing
// (within 30s; for a context of your own, call Migrate first and set
// Config.SkipMigrate). db should come from Open, or be opened with WAL
// journaling. A nil cfg means defaults.
func New(db *sql.DB, cfg *Config) (*Locker, error) {
	l, err := newLocker(db, cfg)
	if err != nil {
		return nil, err
	}
	if cfg != nil && cfg.SkipMigrate {
		return l, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	if err := Migrate(ctx, db, cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Migrate creates the lease table of cfg when it is missing, or upgrades
// one created by an earlier version. New does the same. Like every
// operation it waits up to cfg.BusyTimeout for another connection's or
// process's write lock, whatever busy timeout db has; past that the error
// says so and wraps the driver's SQLITE_BUSY.
func Migrate(ctx context.Context, db *sql.DB, cfg *Config) error {
	if db == nil {
		return fmt.Errorf("sqlitelease: %w: db is nil", aegis.ErrInvalid)
	}
	c, t, err := config(cfg)
	if err != nil {
		return err
	}
	ms := migrate.Format(migrations, t.lease, t.waiter)
	if err := migrate.ApplyBusy(ctx, db, migrate.SQLite, "sqlitelease:"+c.Table, ms, c.BusyTimeout); err != nil {
		return migrateError(err, c.BusyTimeout)
	}
	if c.History == 0 {
		return nil
	}
	hs := migrate.Format(historyMigrations, t.grant)
	if err := migrate.ApplyBusy(ctx, db, migrate.SQLite, "sqlitelease:"+c.Table+grantSuffix, hs, c.BusyTimeout); err != nil {
		return migrateError(err, c.BusyTimeout)
	}
	return nil
}

// migrateError says what a migration's SQLITE_BUSY means: the wait for the
// write lock ran out.
func migrateError(err error, busy time.Duration) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY {
		return fmt.Errorf("sqlitelease: another connection or process held the database's write lock for longer than Config.BusyTimeout (%s): %w", busy, err)
	}
	return fmt.Errorf("sqlitelease: %w", err)
}

// grantSuffix names the grant history after the lease table; it is shorter
// than the waiter table's, whose bound on Table covers it.
const grantSuffix = "_grant"

// tableNames are a Locker's tables, quoted for SQL.
type tableNames struct{ lease, waiter, grant string }

// config fills the defaults of cfg and checks it; it returns the quoted
// tables.
func config(cfg *Config) (c Config, t tableNames, err error) {
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_lease")
	c.BusyTimeout = cmp.Or(c.BusyTimeout, 5*time.Second)
	c.Holder = cmp.Or(c.Holder, rowlease.DefaultHolder())
	if c.BusyTimeout < 0 {
		return c, t, fmt.Errorf("sqlitelease: %w: Config.BusyTimeout %s is negative", aegis.ErrInvalid, c.BusyTimeout)
	}
	if err := rowlease.CheckHolder("sqlitelease: Config.Holder", c.Holder); err != nil {
		return c, t, err
	}
	if err := rowlease.CheckHistory("sqlitelease: Config.History", c.History); err != nil {
		return c, t, err
	}
	if t.lease, err = migrate.Table("sqlitelease: Config.Table", c.Table); err != nil {
		return c, t, err
	}
	const suffix = "_waiter"
	if base := c.Table[strings.LastIndexByte(c.Table, '.')+1:]; len(base)+len(suffix) > 63 {
		return c, t, fmt.Errorf("sqlitelease: Config.Table: %w: %q is longer than 56 characters (the waiter table appends %q)", aegis.ErrInvalid, c.Table, suffix)
	}
	if t.waiter, err = migrate.Table("sqlitelease: Config.Table", c.Table+suffix); err != nil {
		return c, t, err
	}
	if t.grant, err = migrate.Table("sqlitelease: Config.Table", c.Table+grantSuffix); err != nil {
		return c, t, err
	}
	return c, t, nil
}

func newLocker(db *sql.DB, cfg *Config) (*Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("sqlitelease: %w: db is nil", aegis.ErrInvalid)
	}
	c, t, err := config(cfg)
	if err != nil {
		return nil, err
	}
	lease, waiter := t.lease, t.waiter
	returning := ""
	if c.History > 0 {
		returning = ", granted_ms"
	}
	return &Locker{rows: rowlease.Locker{
		Name: "sqlitelease",
		Store: statements{
			db:      db,
			holder:  c.Holder,
			history: int64(c.History),
			record:  fmt.Sprintf(recordSQL, t.grant),
			trim:    fmt.Sprintf(trimSQL, t.grant),
			busy:    fmt.Sprintf("PRAGMA busy_timeout = %d", c.BusyTimeout.Milliseconds()),
			grant:   fmt.Sprintf(grantSQL, lease, waiter, holderLiteral(c.Holder), returning),
			queued:  fmt.Sprintf(grantQueuedSQL, lease, waiter, holderLiteral(c.Holder), returning),
			unhint:  fmt.Sprintf(unhintSQL, lease, waiter),
			renew:   fmt.Sprintf(renewSQL, lease),
			release: fmt.Sprintf(releaseSQL, lease),
			hint:    fmt.Sprintf(hintSQL, lease),
			prune:   fmt.Sprintf(pruneSQL, lease, waiter),
			enqueue: fmt.Sprintf(enqueueSQL, lease, waiter),
			dequeue: fmt.Sprintf(dequeueSQL, lease, waiter),
		},
		// No notifications: a waiter polls, finely, since while it is
		// queued nobody else takes a freed key.
		Poll: backoff.Backoff{Min: 2 * time.Millisecond, Max: 50 * time.Millisecond},
	}}, nil
}

// holderLiteral quotes a checked holder name (rowlease.CheckHolder: valid
// UTF-8, no control character) as an SQLite string literal, in which only
// the quote itself needs escaping.
func holderLiteral(h string) string {
	return "'" + strings.ReplaceAll(h, "'", "''") + "'"
}

// ms converts a TTL to whole milliseconds, rounding up: the store never
// expires a lease before its local deadline.
func ms(ttl time.Duration) int64 {
	return int64(math.Ceil(float64(ttl) / float64(time.Millisecond)))
}

// TryAcquire grants key for ttl unless another owner's lease is live or
// waiters are queued for the key (ErrHeld).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return l.rows.TryAcquire(ctx, key, ttl)
}

// Acquire implements aegis.Waiter: it blocks until key is granted for ttl
// or ctx ends, waiting in the key's queue (see the package doc). When ctx
// ends it returns an error wrapping ctx.Err() and leaves the queue.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return l.rows.Acquire(ctx, key, ttl)
}

// Renew extends lease to now+ttl if it still holds its key; ErrLost
// otherwise.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	return l.rows.Renew(ctx, lease, ttl)
}

// Release frees lease's key if lease still holds it; ErrLost otherwise,
// changing nothing.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	return l.rows.Release(ctx, lease)
}

// statements runs the lease table's statements for rowlease, each
// operation in a BEGIN IMMEDIATE transaction of its own.
type statements struct {
	db                                    *sql.DB
	holder                                string
	history                               int64 // grants kept per key; 0: none
	record, trim                          string
	busy                                  string // PRAGMA busy_timeout statement
	grant, queued, renew, release         string
	hint, unhint, prune, enqueue, dequeue string
}

func (s statements) Grant(ctx context.Context, key, owner string, ttl time.Duration, queued bool) (int64, bool, error) {
	var token int64
	err := s.immediate(ctx, func(conn *sql.Conn) error {
		stmt := s.grant
		if queued {
			stmt = s.queued
		}
		var granted int64
		dest := []any{&token}
		if s.history > 0 {
			dest = append(dest, &granted)
		}
		if err := conn.QueryRowContext(ctx, stmt, key, owner, ms(ttl)).Scan(dest...); err != nil {
			return err
		}
		if queued {
			if err := s.leave(ctx, conn, key, owner); err != nil {
				return err
			}
		}
		if s.history == 0 {
			return nil
		}
		if _, err := conn.ExecContext(ctx, s.record, key, token, s.holder, granted); err != nil {
			return err
		}
		_, err := conn.ExecContext(ctx, s.trim, key, token-s.history)
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return token, true, nil
}

func (s statements) Enqueue(ctx context.Context, key, owner string, ttl time.Duration) error {
	return s.immediate(ctx, func(conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, s.hint, key, ms(ttl))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // no row: the key is not held, nothing to wait for
		}
		if _, err := conn.ExecContext(ctx, s.prune, key, owner); err != nil {
			return err
		}
		_, err = conn.ExecContext(ctx, s.enqueue, key, owner, ms(ttl))
		return err
	})
}

func (s statements) Dequeue(ctx context.Context, key, owner string) error {
	return s.immediate(ctx, func(conn *sql.Conn) error { return s.leave(ctx, conn, key, owner) })
}

// leave removes owner's entry from key's queue and lowers the key's hint.
func (s statements) leave(ctx context.Context, conn *sql.Conn, key, owner string) error {
	if _, err := conn.ExecContext(ctx, s.dequeue, key, owner); err != nil {
		return err
	}
	_, err := conn.ExecContext(ctx, s.unhint, key)
	return err
}

func (s statements) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (bool, error) {
	return s.exec(ctx, s.renew, key, owner, token, ms(ttl))
}

func (s statements) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	return s.exec(ctx, s.release, key, owner, token)
}

func (s statements) exec(ctx context.Context, stmt string, args ...any) (bool, error) {
	var n int64
	err := s.immediate(ctx, func(conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// immediate runs fn in a BEGIN IMMEDIATE transaction on one connection.
func (s statements) immediate(ctx context.Context, fn func(*sql.Conn) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, s.busy); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Also when ctx is cancelled, and when BEGIN itself failed (a
			// cancelled BEGIN may have begun): the connection goes back to
			// the pool and must not keep the write lock.
			migrate.Rollback(ctx, conn)
		}
	}()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err := fn(conn); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}
