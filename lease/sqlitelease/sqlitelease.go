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
// Open opens a database with the settings this package expects (WAL, a busy
// timeout, synchronous=FULL so that a token, once granted, survives a power
// loss).
package sqlitelease

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"modernc.org/sqlite" // the pure-Go driver, registered as "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/rowlease"
)

var _ aegis.Locker = (*Locker)(nil)

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Table is the lease table. Default "aegis_lease".
	Table string
	// BusyTimeout is how long an operation waits for another process's
	// write transaction to end. Default 5s.
	BusyTimeout time.Duration
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
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("sqlitelease: database path is empty")
	}
	q := url.Values{}
	// busy_timeout first: it applies to the statements after it.
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(ON)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitelease: open %s: %w", path, err)
	}
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

// openRetry spaces the attempts of Open on a database another process is
// creating.
var openRetry = backoff.Backoff{Min: time.Millisecond, Max: 100 * time.Millisecond}

// migrateTimeout bounds the table creation that New runs.
const migrateTimeout = 30 * time.Second

// New returns a Locker on db, creating the lease table when it is missing
// (within 30s; call Migrate first to control that with a context of your
// own). db should come from Open, or be opened with WAL journaling. A nil
// cfg means defaults.
func New(db *sql.DB, cfg *Config) (*Locker, error) {
	l, err := newLocker(db, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	if err := Migrate(ctx, db, cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Migrate creates the lease table of cfg when it is missing. New does the
// same.
func Migrate(ctx context.Context, db *sql.DB, cfg *Config) error {
	c, table, err := config(cfg)
	if err != nil {
		return err
	}
	if db == nil {
		return errors.New("sqlitelease: db is nil")
	}
	ms := make([]migrate.Migration, len(migrations))
	for i, m := range migrations {
		ms[i] = migrate.Migration{Version: m.Version, SQL: fmt.Sprintf(m.SQL, table)}
	}
	if err := migrate.Apply(ctx, db, migrate.SQLite, "sqlitelease:"+c.Table, ms); err != nil {
		return fmt.Errorf("sqlitelease: %w", err)
	}
	return nil
}

func config(cfg *Config) (Config, string, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_lease")
	c.BusyTimeout = cmp.Or(c.BusyTimeout, 5*time.Second)
	if c.BusyTimeout < 0 {
		return c, "", fmt.Errorf("sqlitelease: Config.BusyTimeout %s is negative", c.BusyTimeout)
	}
	table, err := migrate.Table("sqlitelease: Config.Table", c.Table)
	return c, table, err
}

func newLocker(db *sql.DB, cfg *Config) (*Locker, error) {
	if db == nil {
		return nil, errors.New("sqlitelease: db is nil")
	}
	c, table, err := config(cfg)
	if err != nil {
		return nil, err
	}
	return &Locker{rows: rowlease.Locker{Name: "sqlitelease", Store: statements{
		db:      db,
		busy:    fmt.Sprintf("PRAGMA busy_timeout = %d", c.BusyTimeout.Milliseconds()),
		acquire: fmt.Sprintf(acquireSQL, table),
		renew:   fmt.Sprintf(renewSQL, table),
		release: fmt.Sprintf(releaseSQL, table),
	}}}, nil
}

// ms converts a TTL to whole milliseconds, rounding up: the store never
// expires a lease before its local deadline.
func ms(ttl time.Duration) int64 {
	return int64(math.Ceil(float64(ttl) / float64(time.Millisecond)))
}

// TryAcquire grants key for ttl unless another owner's lease is live
// (ErrHeld).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return l.rows.TryAcquire(ctx, key, ttl)
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

// statements runs the lease table's statements for rowlease, each in a
// BEGIN IMMEDIATE transaction of its own.
type statements struct {
	db                      *sql.DB
	busy                    string // PRAGMA busy_timeout statement
	acquire, renew, release string
}

func (s statements) Grant(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	var token int64
	err := s.immediate(ctx, func(conn *sql.Conn) error {
		return conn.QueryRowContext(ctx, s.acquire, key, owner, ms(ttl)).Scan(&token)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return token, err == nil, err
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
	return n > 0, err
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
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Also when ctx is cancelled: the connection goes back to the
			// pool and must not keep the write lock.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := fn(conn); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}
