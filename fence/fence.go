// Package fence is the storage-side half of fencing: the store of record
// checks a lease's token in the same transaction as the business write, so
// a holder that was paused past its lease (and replaced by a holder with a
// greater token) changes nothing.
//
// Three forms, for three kinds of stores:
//
//   - Check / CheckSQL record the greatest token accepted per resource in
//     the aegis_fence table. A write with a lower token gets ErrStale and the
//     caller rolls back. The same holder may write many times with one token.
//   - Exec / ExecSQL run a statement on a business table that carries its
//     own token column ("… WHERE id = $1 AND token = $2"): no row affected
//     means stale.
//   - Objects: a store that cannot compare tokens (a file system, S3) is
//     written under a key that contains the token (TokenKey), and the row
//     naming the canonical object is committed through the fence; Sweep
//     deletes what no row references and no holder can commit any more.
//
// What the fence does not do: stop a stale holder's side effects outside the
// fenced store (an e-mail, a call to a service that does not check the
// token). Those need idempotency on the receiving side.
package fence

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// The fence table, one row per resource with the greatest token accepted.
const (
	migrateSQL = `CREATE TABLE IF NOT EXISTS aegis_fence (
	resource text   PRIMARY KEY,
	token    bigint NOT NULL
)`
	// checkSQL records token for resource unless a greater one was accepted:
	// the row lock orders concurrent writers, and the loser's WHERE is
	// re-evaluated against the winner's token. Works on PostgreSQL and SQLite.
	checkSQL = `INSERT INTO aegis_fence AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token
WHERE f.token <= excluded.token -- fence: a lower token never lands`
)

// Migrate creates the fence table if it is missing (PostgreSQL). It is safe
// to call from many processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return apply(ctx, db, migrate.Postgres)
}

// MigrateSQL does the same through database/sql (PostgreSQL or SQLite).
func MigrateSQL(ctx context.Context, db *sql.DB) error {
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return fmt.Errorf("fence: migrate: %w", err)
	}
	return apply(ctx, db, d)
}

func apply(ctx context.Context, db *sql.DB, d migrate.Dialect) error {
	if err := migrate.Apply(ctx, db, d, "fence", []migrate.Migration{{Version: 1, SQL: migrateSQL}}); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return nil
}

// Check records token for resource inside tx. When a greater token was
// already accepted it writes nothing and returns aegis.ErrStale; the caller
// rolls back.
func Check(ctx context.Context, tx pgx.Tx, resource string, token aegis.Token) error {
	tag, err := tx.Exec(ctx, checkSQL, resource, int64(token))
	if err != nil {
		return fmt.Errorf("fence: check %q: %w", resource, err)
	}
	return stale(tag.RowsAffected(), resource, token)
}

// CheckSQL is Check for a database/sql transaction (PostgreSQL or SQLite).
func CheckSQL(ctx context.Context, tx *sql.Tx, resource string, token aegis.Token) error {
	res, err := tx.ExecContext(ctx, checkSQL, resource, int64(token))
	if err != nil {
		return fmt.Errorf("fence: check %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: check %q: %w", resource, err)
	}
	return stale(n, resource, token)
}

// Execer is what Exec needs: a pgx pool, connection or transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Exec runs a fenced statement on a business table that carries its own
// token column, such as
//
//	UPDATE invoice_export SET status = 'FINISHED' WHERE period = $1 AND token = $2
//
// and returns aegis.ErrStale when it affects no row: another holder's token
// is in the row now. The statement's WHERE clause must compare the token;
// Exec cannot check that it does. It returns the rows affected.
func Exec(ctx context.Context, db Execer, sql string, args ...any) (int64, error) {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("fence: exec: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return 0, aegis.ErrStale
	}
	return tag.RowsAffected(), nil
}

// SQLExecer is what ExecSQL needs: a *sql.DB, *sql.Conn or *sql.Tx.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecSQL is Exec through database/sql (PostgreSQL or SQLite).
func ExecSQL(ctx context.Context, db SQLExecer, query string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("fence: exec: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("fence: exec: %w", err)
	}
	if n == 0 {
		return 0, aegis.ErrStale
	}
	return n, nil
}

func stale(rows int64, resource string, token aegis.Token) error {
	if rows == 0 {
		return fmt.Errorf("%w: resource %q already accepted a token greater than %d", aegis.ErrStale, resource, token)
	}
	return nil
}
