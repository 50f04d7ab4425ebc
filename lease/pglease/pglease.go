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
package pglease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/rowlease"
)

var _ aegis.Locker = (*Locker)(nil)

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Table is the lease table, optionally schema-qualified. Default
	// "aegis_lease".
	Table string
}

// Locker is a PostgreSQL lease table. It is safe for concurrent use.
type Locker struct {
	pool        *pgxpool.Pool
	name, table string // as configured; quoted for SQL
	rows        rowlease.Locker
}

// migrateTimeout bounds the table creation that New runs. Teams that want
// their own context call Migrate.
const migrateTimeout = 30 * time.Second

// New returns a Locker on pool, creating the lease table when it is missing
// (within 30s; call Migrate first to control that with a context of your
// own). A nil cfg means defaults.
func New(pool *pgxpool.Pool, cfg *Config) (*Locker, error) {
	l, err := newLocker(pool, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Migrate creates the lease table of cfg when it is missing, for teams that
// run migrations apart from their services. New does the same.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg *Config) error {
	l, err := newLocker(pool, cfg)
	if err != nil {
		return err
	}
	return l.migrate(ctx)
}

func newLocker(pool *pgxpool.Pool, cfg *Config) (*Locker, error) {
	if pool == nil {
		return nil, errors.New("pglease: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_lease")
	table, err := migrate.Table("pglease: Config.Table", c.Table)
	if err != nil {
		return nil, err
	}
	return &Locker{
		pool:  pool,
		name:  c.Table,
		table: table,
		rows: rowlease.Locker{Name: "pglease", Store: statements{
			pool:    pool,
			acquire: fmt.Sprintf(acquireSQL, table),
			renew:   fmt.Sprintf(renewSQL, table),
			release: fmt.Sprintf(releaseSQL, table),
		}},
	}, nil
}

func (l *Locker) migrate(ctx context.Context) error {
	ms := make([]migrate.Migration, len(migrations))
	for i, m := range migrations {
		ms[i] = migrate.Migration{Version: m.Version, SQL: fmt.Sprintf(m.SQL, l.table)}
	}
	db := stdlib.OpenDBFromPool(l.pool)
	defer db.Close()
	if err := migrate.Apply(ctx, db, migrate.Postgres, "pglease:"+l.name, ms); err != nil {
		return fmt.Errorf("pglease: %w", err)
	}
	return nil
}

// TryAcquire grants key for ttl unless another owner's lease is live
// (ErrHeld). One round trip.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return l.rows.TryAcquire(ctx, key, ttl)
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
	pool                    *pgxpool.Pool
	acquire, renew, release string
}

func (s statements) Grant(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	var token int64
	err := s.pool.QueryRow(ctx, s.acquire, key, owner, ttl.Microseconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return token, err == nil, err
}

func (s statements) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (bool, error) {
	return s.exec(ctx, s.renew, key, owner, token, ttl.Microseconds())
}

func (s statements) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	return s.exec(ctx, s.release, key, owner, token)
}

func (s statements) exec(ctx context.Context, sql string, args ...any) (bool, error) {
	tag, err := s.pool.Exec(ctx, sql, args...)
	return tag.RowsAffected() > 0, err
}
