package pglease

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/rowlease"
)

// The operator's reads (Inspector). %[1]s is the quoted lease table, %[2]s
// the quoted grant history; in keysSQL and keySQL, %%[1]s becomes the
// holder column. A released key expires at -infinity, which database/sql
// cannot scan: the epoch stands for it (long expired either way).
const (
	tablesSQL = `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
	EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'holder' AND NOT attisdropped)`
	keysSQL   = `SELECT key, %%[1]s, token, greatest(granted_at, 'epoch'), greatest(expires_at, 'epoch') FROM %[1]s ORDER BY key LIMIT $1`
	keySQL    = `SELECT key, %%[1]s, token, greatest(granted_at, 'epoch'), greatest(expires_at, 'epoch') FROM %[1]s WHERE key = $1`
	grantsSQL = `SELECT token, holder, granted_at FROM %[2]s WHERE key = $1 ORDER BY token DESC LIMIT $2`
	// expiredSQL reads the grants that ran out instead of being released
	// (a holder that crashed, or paused past its TTL), the latest expiry
	// first.
	expiredSQL = `SELECT key, token, granted_at, expires_at
FROM %[1]s WHERE expires_at <= now() AND expires_at > '-infinity'
ORDER BY expires_at DESC LIMIT $1`
)

// Key is a key's row of the lease table as an operator reads it: key,
// holder name (Config.Holder; empty for a grant made before holder names),
// token, the grant's and the expiry's database time, and whether it was
// released (its Expires is then the Unix epoch). The owner id is never
// read.
type Key = rowlease.Key

// Grant is a grant recorded in the grant history (Config.History): token,
// holder name and database time.
type Grant = rowlease.Grant

// Inspector reads a lease table and its grant history for an operator
// (aegis console, aegis inspect), through database/sql with pgx's stdlib
// driver (NewInspector) or over a pgx pool (NewInspectorFromPool). Unlike
// New it creates and migrates nothing: Tables tells what is there. It is
// safe for concurrent use.
type Inspector struct {
	r       rowlease.Reader // its DB is nil for a pool's Inspector (see open)
	expired string
	pool    *pgxpool.Pool // NewInspectorFromPool's
}

// NewInspector returns an Inspector of the tables of cfg (Table, and the
// grant history named after it; the other fields do not matter) on db. A
// nil cfg means defaults. It does no I/O; bad config is an error wrapping
// aegis.ErrInvalid.
func NewInspector(db *sql.DB, cfg *Config) (*Inspector, error) {
	if db == nil {
		return nil, fmt.Errorf("pglease: %w: db is nil", aegis.ErrInvalid)
	}
	return newInspector(db, cfg)
}

// newInspector is NewInspector on db, nil for a pool's Inspector.
func newInspector(db *sql.DB, cfg *Config) (*Inspector, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_lease")
	lease, err := migrate.Table("pglease: Config.Table", c.Table)
	if err != nil {
		return nil, err
	}
	grant, err := migrate.Table("pglease: Config.Table", c.Table+grantSuffix)
	if err != nil {
		return nil, err
	}
	f := func(s string) string { return fmt.Sprintf(s, lease, grant) }
	return &Inspector{
		r: rowlease.Reader{DB: db, Args: []any{lease, grant}, ReadStatements: rowlease.ReadStatements{
			Tables: tablesSQL, Keys: f(keysSQL), Key: f(keySQL), Grants: f(grantsSQL),
		}},
		expired: fmt.Sprintf(expiredSQL, lease),
	}, nil
}

// NewInspectorFromPool is NewInspector on pool's database, for a program
// whose handle is a pgx pool. A nil pool is an error wrapping
// aegis.ErrInvalid; so is bad config. It does no I/O.
//
// Each read borrows the pool through database/sql for its duration
// (stdlib.OpenDBFromPool, closed when the read returns), as
// queue.NewInspectorFromPool does, so the Inspector holds nothing to close
// and the pool stays the caller's.
func NewInspectorFromPool(pool *pgxpool.Pool, cfg *Config) (*Inspector, error) {
	if pool == nil {
		return nil, fmt.Errorf("pglease: %w: NewInspectorFromPool: pool is nil", aegis.ErrInvalid)
	}
	i, err := newInspector(nil, cfg)
	if err != nil {
		return nil, err
	}
	i.pool = pool
	return i, nil
}

// open returns the reader for one read, and what ends it: i's own, or for
// a pool's Inspector one on a database/sql handle of the pool, which done
// closes (it holds a goroutine until closed).
func (i *Inspector) open() (r rowlease.Reader, done func()) {
	if i.pool == nil {
		return i.r, func() {}
	}
	r = i.r
	db := stdlib.OpenDBFromPool(i.pool)
	r.DB = db
	return r, func() { _ = db.Close() }
}

// Tables tells whether the lease table and the grant history are there.
func (i *Inspector) Tables(ctx context.Context) (lease, history bool, err error) {
	r, done := i.open()
	defer done()
	lease, history, err = r.Tables(ctx)
	if err != nil {
		return false, false, fmt.Errorf("pglease: %w", err)
	}
	return lease, history, nil
}

// Keys reads every key of the lease table, ordered by key, at most limit
// (at least 1). A table created before holder names reads as keys without
// holders.
func (i *Inspector) Keys(ctx context.Context, limit int) ([]Key, error) {
	if limit < 1 {
		return nil, fmt.Errorf("pglease: %w: keys: limit %d is not positive", aegis.ErrInvalid, limit)
	}
	r, done := i.open()
	defer done()
	ks, err := r.Keys(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("pglease: %w", err)
	}
	return ks, nil
}

// Key reads key's row; ok is false when the table has none (no grant of
// key was ever made).
func (i *Inspector) Key(ctx context.Context, key string) (k Key, ok bool, err error) {
	r, done := i.open()
	defer done()
	k, ok, err = r.Key(ctx, key)
	if err != nil {
		return Key{}, false, fmt.Errorf("pglease: %w", err)
	}
	return k, ok, nil
}

// Grants reads key's recorded grants, the newest (greatest token) first,
// at most limit (at least 1). A missing history is an error: Tables tells
// first whether it is there.
func (i *Inspector) Grants(ctx context.Context, key string, limit int) ([]Grant, error) {
	if limit < 1 {
		return nil, fmt.Errorf("pglease: %w: grants: limit %d is not positive", aegis.ErrInvalid, limit)
	}
	r, done := i.open()
	defer done()
	gs, err := r.Grants(ctx, key, limit)
	if err != nil {
		return nil, fmt.Errorf("pglease: %w", err)
	}
	return gs, nil
}

// Expired reads the keys whose last grant ran out instead of being
// released (a holder that crashed, or paused past its TTL), the latest
// expiry first, at most limit (at least 1), by the database's clock. Their
// Holder is not read (empty).
func (i *Inspector) Expired(ctx context.Context, limit int) ([]Key, error) {
	if limit < 1 {
		return nil, fmt.Errorf("pglease: %w: expired: limit %d is not positive", aegis.ErrInvalid, limit)
	}
	r, done := i.open()
	defer done()
	rows, err := r.DB.QueryContext(ctx, i.expired, limit)
	if err != nil {
		return nil, fmt.Errorf("pglease: read the expired leases: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var k Key
		var token int64
		if err := rows.Scan(&k.Key, &token, &k.Granted, &k.Expires); err != nil {
			return nil, fmt.Errorf("pglease: read the expired leases: %w", err)
		}
		k.Token = aegis.Token(token)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pglease: read the expired leases: %w", err)
	}
	return out, nil
}
