package schedule

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// The constructors over a pgx pool bridge it to database/sql inside, so
// that the store, the catalog and the run reader keep one code path for
// PostgreSQL and SQLite. The bridge (stdlib.OpenDBFromPool) keeps no idle
// connection: each statement borrows one of the pool's and gives it back,
// so the pool's Close does not wait for the bridge, and the bridge's Close
// does not close the pool. What the bridge owns is a goroutine of
// database/sql's, which the value's Close ends.

// openBridge opens the database/sql handle over pool that a constructor's
// value owns, or returns the error naming the nil pool.
func openBridge(fn string, pool *pgxpool.Pool) (*sql.DB, error) {
	if pool == nil {
		return nil, invalid("schedule: %s: pool is nil", fn)
	}
	return stdlib.OpenDBFromPool(pool), nil
}

// NewStoreFromPool is NewStore on pool's PostgreSQL database: it returns the
// run table, applying its numbered migrations. A nil cfg means defaults (as
// for NewStore). A nil pool is an error wrapping aegis.ErrInvalid; so is bad
// config, naming the field.
//
// The pool stays the caller's: the Store borrows one of its connections per
// statement and closes nothing of the pool's. Close the Store after the
// schedulers using it have stopped; closing the pool, before or after, is
// the caller's.
func NewStoreFromPool(ctx context.Context, pool *pgxpool.Pool, cfg *StoreConfig) (*Store, error) {
	db, err := openBridge("NewStoreFromPool", pool)
	if err != nil {
		return nil, err
	}
	s, err := NewStore(ctx, db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.bridge = db
	return s, nil
}

// Close releases what NewStoreFromPool opened over the pool (a
// database/sql handle and its goroutine); it does not close the pool. On a
// Store of NewStore it does nothing: the *sql.DB is the caller's. After
// Close the Store's calls fail. It is safe to call more than once; the
// error is the handle's.
func (s *Store) Close() error {
	if s.bridge == nil {
		return nil
	}
	return s.bridge.Close()
}

// NewCatalogFromPool is NewCatalog on pool's PostgreSQL database: it
// returns the catalog of cfg's namespace, applying its numbered migrations.
// A nil cfg means defaults (as for NewCatalog). A nil pool is an error
// wrapping aegis.ErrInvalid; so is bad config, naming the field.
//
// The pool stays the caller's (see NewStoreFromPool): a Scheduler with
// this Catalog holds one of its connections for LISTEN while it runs.
// Close the Catalog after the schedulers using it have stopped.
func NewCatalogFromPool(ctx context.Context, pool *pgxpool.Pool, cfg *CatalogConfig) (*Catalog, error) {
	db, err := openBridge("NewCatalogFromPool", pool)
	if err != nil {
		return nil, err
	}
	c, err := NewCatalog(ctx, db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	c.bridge = db
	return c, nil
}

// Close releases what NewCatalogFromPool opened over the pool; it does
// not close the pool. On a Catalog of NewCatalog it does nothing. After
// Close the Catalog's calls fail. It is safe to call more than once; the
// error is the handle's.
func (c *Catalog) Close() error {
	if c.bridge == nil {
		return nil
	}
	return c.bridge.Close()
}

// NewRunReaderFromPool is NewRunReader on pool's PostgreSQL database: a
// reader of the run table of cfg (defaults as for NewStore) that creates
// nothing. A nil pool is an error wrapping aegis.ErrInvalid; so is bad
// config, naming the field. The pool stays the caller's (see
// NewStoreFromPool).
func NewRunReaderFromPool(ctx context.Context, pool *pgxpool.Pool, cfg *StoreConfig) (*RunReader, error) {
	db, err := openBridge("NewRunReaderFromPool", pool)
	if err != nil {
		return nil, err
	}
	r, err := NewRunReader(ctx, db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	r.bridge = db
	return r, nil
}

// Close releases what NewRunReaderFromPool opened over the pool; it does
// not close the pool. On a RunReader of NewRunReader it does nothing.
// After Close the reader's calls fail. It is safe to call more than once;
// the error is the handle's.
func (r *RunReader) Close() error {
	if r.bridge == nil {
		return nil
	}
	return r.bridge.Close()
}
