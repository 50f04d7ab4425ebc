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
	"github.com/aegislab/aegis/internal/owner"
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
	pool                    *pgxpool.Pool
	name, table             string // as configured; quoted for SQL
	acquire, renew, release string
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
		pool:    pool,
		name:    c.Table,
		table:   table,
		acquire: fmt.Sprintf(acquireSQL, table),
		renew:   fmt.Sprintf(renewSQL, table),
		release: fmt.Sprintf(releaseSQL, table),
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
	if err := aegis.CheckKey(key); err != nil {
		return nil, err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	id := owner.New()
	start := time.Now()
	var token int64
	err := l.pool.QueryRow(ctx, l.acquire, key, id, ttl.Microseconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, aegis.ErrHeld
	}
	if err != nil {
		return nil, fmt.Errorf("pglease: acquire %q: %w", key, err)
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(token),
		Owner:    id,
		TTL:      ttl,
		Deadline: aegis.LocalDeadline(start, ttl),
	}, nil
}

// Renew extends lease to now+ttl, database time, if it still holds its key;
// ErrLost otherwise. One round trip.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return err
	}
	start := time.Now()
	if err := l.exec(ctx, "renew", l.renew, lease, ttl.Microseconds()); err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = aegis.LocalDeadline(start, ttl)
	return nil
}

// Release frees lease's key if lease still holds it; ErrLost otherwise,
// changing nothing. One round trip.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	return l.exec(ctx, "release", l.release, lease)
}

// exec runs a statement that compares owner and token; no row means lost.
func (l *Locker) exec(ctx context.Context, op, sql string, lease *aegis.Lease, args ...any) error {
	tag, err := l.pool.Exec(ctx, sql, append([]any{lease.Key, lease.Owner, int64(lease.Token)}, args...)...)
	if err != nil {
		return fmt.Errorf("pglease: %s %q: %w", op, lease.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return aegis.ErrLost
	}
	return nil
}
