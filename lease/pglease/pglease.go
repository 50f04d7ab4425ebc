// Package pglease is an aegis.Locker on a PostgreSQL lease table.
//
// A key is one row. The grant is one INSERT … ON CONFLICT DO UPDATE that
// takes a free or expired key and increments its token in the same
// statement; renew and release are UPDATEs that compare owner and token.
// Expiry is computed by the database (now()), so client clocks do not
// matter. A key's row is never deleted, so its token survives every release
// and expiry and a fence never sees it go back.
//
// Guarantees: on one PostgreSQL primary, at most one live grant per key, and
// every grant's token is greater than every earlier grant's. A holder that
// is paused past its TTL still believes it holds; its writes must go through
// the fence (package fence) with its token.
//
// Failover: a lease is a row, so it is exactly as durable as a commit. With
// synchronous replication (synchronous_commit = on or remote_apply, and a
// synchronous standby) a failover loses nothing. With asynchronous
// replication a failover can lose the last grants and renewals: the promoted
// replica may not have the newest grant (so a second owner can be granted
// while the first still works), and the key's token can be lower on the new
// primary than a token already handed out, so a fence on that same database
// lost the same writes. Keep the fence in the same database as the lease and
// the business data: whatever the failover lost, it lost together.
//
// Each grant's row is kept for good: a workload that uses a new key for
// every run (a key per tick) grows the table by one small row per key.
//
// Waiting: [aegis.Acquire] waits in the key's queue (Locker implements
// [aegis.Waiter]), a second table beside the lease table, so a holder that
// releases and asks again at once goes behind the waiters instead of
// starving them; a waiter that crashes holds up a free key for at most a
// second. A release of a key with waiters sends a NOTIFY that wakes them
// (Locker implements [aegis.Notifier] over LISTEN/NOTIFY, one connection
// per Locker taken from the pool while one of its callers waits); a lease
// that expires sends nothing, so waiters also poll, every 100ms at most.
// TryAcquire refuses a key that waiters are queued for (ErrHeld), which it
// learns from the key's own row; a release nobody waits for sends no NOTIFY.
//
// Operators: each grant writes a holder name (Config.Holder, "host/pid" by
// default) beside its owner, so that a console can show who holds a key
// without the owner id, which stays a secret. With Config.History, each
// grant also records (key, token, holder, time) in a history table and
// trims the key's grants beyond the last History, in the grant's own
// statement (a data-modifying CTE), so a grant is still one round trip. It
// is off by default: it adds two writes to every grant.
package pglease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/rowlease"
)

var (
	_ aegis.Locker   = (*Locker)(nil)
	_ aegis.Waiter   = (*Locker)(nil)
	_ aegis.Notifier = (*Locker)(nil)
)

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Table is the lease table, optionally schema-qualified. Default
	// "aegis_lease". The waiter queue is the table of the same name with
	// "_waiter" appended, so the name (after the schema) is at most 56
	// characters.
	Table string
	// Holder names this process for operators: every grant writes it
	// beside the grant's owner (the owner id stays a secret the console
	// never reads). Renew keeps it, and so does Release: a free key's row
	// says who held it last. Default "host/pid" (os.Hostname and
	// os.Getpid); at most 255 bytes of UTF-8 without control characters.
	Holder string
	// History, when positive, keeps the last History grants of each key
	// (token, holder, granted at, database time) in the table named Table
	// with "_grant" appended, created by New or Migrate. Each grant then
	// inserts a row and deletes the one that falls off, in the grant's own
	// statement. Default 0: off, because it adds two writes to every grant
	// (see docs/decisions.md). At most 1000. Lockers of one table may
	// differ: the history then has gaps where a Locker without it granted,
	// and the grants that one with a smaller History leaves above its own
	// bound are deleted at every 64th token (see recordSQL).
	History int
	// SkipMigrate stops New from creating or upgrading the tables: the
	// caller ran Migrate first, with a context of its own. New then makes
	// one query (the lease table's oid, which names its notification
	// channel), within the same 10 s bound, and fails when the table is
	// missing. Default false: New migrates.
	SkipMigrate bool
}

// Locker is a PostgreSQL lease table. It is safe for concurrent use.
type Locker struct {
	rows   rowlease.Locker
	listen *listener
}

// newTimeout bounds New's own I/O, which has no context: a migration that
// is up to date is one query, and applying one takes milliseconds unless
// another process migrates at the same moment, so 10 s is ample for a
// server that answers, and short enough that a service on a server that
// does not (it accepts connections and never replies) fails at start,
// saying so, instead of appearing hung. Callers that want their own bound
// call Migrate with their context and set Config.SkipMigrate.
const newTimeout = 10 * time.Second

// errNewTimeout is the cause of New's context when newTimeout passes.
var errNewTimeout = fmt.Errorf("no answer within %s, New's bound (call Migrate with a context of your own, then New with Config.SkipMigrate)", newTimeout)

// New returns a Locker on pool, creating the lease table when it is missing
// and upgrading one created by an earlier version, unless cfg.SkipMigrate.
// A nil cfg means defaults. Its I/O (the migration, and one query for the
// table's oid) is bounded by 10 s; for a context of your own, call Migrate
// first and set Config.SkipMigrate. An error names the server as host:port
// (never the URL or password); with SkipMigrate, a missing table is an
// error that says to run Migrate.
func New(pool *pgxpool.Pool, cfg *Config) (*Locker, error) {
	t, err := tables(pool, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), newTimeout, errNewTimeout)
	defer cancel()
	if !t.skipMigrate {
		if err := t.migrate(ctx); err != nil {
			return nil, newError(ctx, err)
		}
	}
	// The channel is named for the table's oid: unique per table in the
	// database, whatever its schema or search_path, and a short identifier.
	var oid uint32
	if err := pool.QueryRow(ctx, "SELECT $1::regclass::oid", t.lease).Scan(&oid); err != nil {
		var pg *pgconn.PgError
		if t.skipMigrate && errors.As(err, &pg) && pg.Code == "42P01" { // undefined_table
			return nil, fmt.Errorf("pglease: PostgreSQL at %s: table %s is missing (Config.SkipMigrate is set: run Migrate first): %w", server(pool), t.name, err)
		}
		return nil, newError(ctx, fmt.Errorf("pglease: PostgreSQL at %s: find table %s: %w", server(pool), t.name, err))
	}
	channel := fmt.Sprintf("aegis_lease_%d", oid)
	literal := "'" + channel + "'"
	l := &Locker{listen: newListener(pool, channel)}
	l.rows = rowlease.Locker{
		Name: "pglease",
		Store: statements{
			pool:        pool,
			holder:      t.holder,
			grant:       t.grantSQL(),
			grantQueued: t.grantQueuedSQL(),
			renew:       fmt.Sprintf(renewSQL, t.lease),
			release:     fmt.Sprintf(releaseSQL, t.lease, t.waiter, literal),
			enqueue:     fmt.Sprintf(enqueueSQL, t.lease, t.waiter),
			dequeue:     fmt.Sprintf(dequeueSQL, t.lease, t.waiter, literal),
		},
		Notify: l.listen.Notify,
	}
	return l, nil
}

// newError is err of New's I/O, saying so when New's own bound ended it.
func newError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errNewTimeout) {
		return fmt.Errorf("%w: %w", err, errNewTimeout)
	}
	return err
}

// server names pool's server as host:port (a Unix socket: its directory and
// port), and nothing else of its configuration, which may hold a password.
func server(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	if strings.HasPrefix(cc.Host, "/") {
		return fmt.Sprintf("%s (port %d)", cc.Host, cc.Port)
	}
	return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
}

// Migrate creates the lease table of cfg when it is missing, or upgrades it,
// and the grant history table when cfg.History is positive, for teams that
// run migrations apart from their services (then New with
// Config.SkipMigrate migrates nothing). New does the same. It waits until
// ctx ends; an error names the server as host:port.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg *Config) error {
	t, err := tables(pool, cfg)
	if err != nil {
		return err
	}
	return t.migrate(ctx)
}

// tableSet is a Locker's tables, checked and quoted, and the rest of its
// checked config.
type tableSet struct {
	pool                 *pgxpool.Pool
	name                 string // as configured
	lease, waiter, grant string // quoted for SQL
	holder               string
	history              int
	skipMigrate          bool
}

func (t tableSet) grantSQL() string {
	if t.history == 0 {
		return fmt.Sprintf(grantSQL, t.lease)
	}
	return fmt.Sprintf(grantHistorySQL, t.lease, t.waiter, t.grant, t.history)
}

func (t tableSet) grantQueuedSQL() string {
	if t.history == 0 {
		return fmt.Sprintf(grantQueuedSQL+grantQueuedEnd, t.lease, t.waiter)
	}
	return fmt.Sprintf(grantQueuedSQL+recordSQL+grantQueuedEnd, t.lease, t.waiter, t.grant, t.history)
}

func tables(pool *pgxpool.Pool, cfg *Config) (tableSet, error) {
	if pool == nil {
		return tableSet{}, fmt.Errorf("pglease: %w: pool is nil", aegis.ErrInvalid)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_lease")
	c.Holder = cmp.Or(c.Holder, rowlease.DefaultHolder())
	if err := rowlease.CheckHolder("pglease: Config.Holder", c.Holder); err != nil {
		return tableSet{}, err
	}
	if err := rowlease.CheckHistory("pglease: Config.History", c.History); err != nil {
		return tableSet{}, err
	}
	lease, err := migrate.Table("pglease: Config.Table", c.Table)
	if err != nil {
		return tableSet{}, err
	}
	const suffix = "_waiter"
	if base := c.Table[strings.LastIndexByte(c.Table, '.')+1:]; len(base)+len(suffix) > 63 {
		return tableSet{}, fmt.Errorf("pglease: Config.Table: %w: %q is longer than 56 characters (the waiter table appends %q)", aegis.ErrInvalid, c.Table, suffix)
	}
	waiter, err := migrate.Table("pglease: Config.Table", c.Table+suffix)
	if err != nil {
		return tableSet{}, err
	}
	grant, err := migrate.Table("pglease: Config.Table", c.Table+grantSuffix)
	if err != nil {
		return tableSet{}, err
	}
	return tableSet{pool: pool, name: c.Table, lease: lease, waiter: waiter, grant: grant, holder: c.Holder, history: c.History, skipMigrate: c.SkipMigrate}, nil
}

// grantSuffix names the grant history after the lease table; it is shorter
// than the waiter table's, whose bound on Table covers it.
const grantSuffix = "_grant"

func (t tableSet) migrate(ctx context.Context) error {
	ms := migrate.Format(migrations, t.lease, t.waiter)
	db := stdlib.OpenDBFromPool(t.pool)
	defer db.Close()
	if err := migrate.Apply(ctx, db, migrate.Postgres, "pglease:"+t.name, ms); err != nil {
		return fmt.Errorf("pglease: PostgreSQL at %s: %w", server(t.pool), err)
	}
	if t.history == 0 {
		return nil
	}
	hs := migrate.Format(historyMigrations, t.grant)
	if err := migrate.Apply(ctx, db, migrate.Postgres, "pglease:"+t.name+grantSuffix, hs); err != nil {
		return fmt.Errorf("pglease: PostgreSQL at %s: %w", server(t.pool), err)
	}
	return nil
}

// TryAcquire grants key for ttl unless another owner's lease is live or
// waiters are queued for the key (ErrHeld). One round trip.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return l.rows.TryAcquire(ctx, key, ttl)
}

// Acquire implements aegis.Waiter: it blocks until key is granted for ttl
// or ctx ends, waiting in the key's queue and woken by releases (see the
// package doc). When ctx ends it returns an error wrapping ctx.Err() and
// leaves the queue.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return l.rows.Acquire(ctx, key, ttl)
}

// Notify implements aegis.Notifier: the channel receives a value when a
// lease of key is released while waiters are queued for it, or when a
// waiter gives up. It is closed when the listening connection fails. The
// function ends the subscription; the last one of a Locker closes its
// listening connection.
func (l *Locker) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, nil, err
	}
	return l.listen.Notify(ctx, key)
}

// Renew extends lease to now+ttl, database time, if it still holds its key;
// ErrLost otherwise. One round trip.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	return l.rows.Renew(ctx, lease, ttl)
}

// Release frees lease's key if lease still holds it; ErrLost otherwise,
// changing nothing. One round trip.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	return l.rows.Release(ctx, lease)
}

// statements runs the lease table's statements for rowlease.
type statements struct {
	pool                                                 *pgxpool.Pool
	holder                                               string
	grant, grantQueued, renew, release, enqueue, dequeue string
}

func (s statements) Grant(ctx context.Context, key, owner string, ttl time.Duration, queued bool) (int64, bool, error) {
	sql := s.grant
	if queued {
		sql = s.grantQueued
	}
	var token int64
	err := s.pool.QueryRow(ctx, sql, key, owner, ttl.Microseconds(), s.holder).Scan(&token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return token, true, nil
}

func (s statements) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (bool, error) {
	return s.exec(ctx, s.renew, key, owner, token, ttl.Microseconds())
}

func (s statements) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	return s.exec(ctx, s.release, key, owner, token)
}

func (s statements) Enqueue(ctx context.Context, key, owner string, ttl time.Duration) error {
	_, err := s.pool.Exec(ctx, s.enqueue, key, owner, ttl.Microseconds())
	return err
}

func (s statements) Dequeue(ctx context.Context, key, owner string) error {
	_, err := s.pool.Exec(ctx, s.dequeue, key, owner)
	return err
}

// exec runs a statement that compares owner and token: matched tells that
// it changed a row, and is false whenever err is not nil.
func (s statements) exec(ctx context.Context, sql string, args ...any) (bool, error) {
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}
