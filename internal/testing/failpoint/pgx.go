package failpoint

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgxDB is what Pgx wraps and returns: a pgxpool.Pool's query methods
// and Begin.
type PgxDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Pgx returns db with its statements failing as p's rules say (on
// PostgreSQL: Data sends PostgresDataError). A statement in a transaction
// of Begin that an After rule matches runs, and the transaction's Commit
// commits, then reports its reply lost. A COPY (Tx.CopyFrom) is matched
// as "COPY " and the table's sanitized name.
func (p *Plan) Pgx(db PgxDB) PgxDB { return &pgxDB{inner: db, p: p} }

type pgxDB struct {
	inner PgxDB
	p     *Plan
}

func (d *pgxDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r := d.p.take(sql)
	if r == nil {
		return d.inner.Exec(ctx, sql, args...)
	}
	switch r.fault {
	case Before:
		return pgconn.CommandTag{}, &Error{Rule: r.name, Fault: Before}
	case Data:
		return pgconn.CommandTag{}, pgxDataError(ctx, d.inner)
	}
	if _, err := d.inner.Exec(ctx, sql, args...); err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.CommandTag{}, &Error{Rule: r.name, Fault: After}
}

func (d *pgxDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r := d.p.take(sql)
	if r == nil {
		return d.inner.Query(ctx, sql, args...)
	}
	return nil, d.fail(ctx, r, sql, args)
}

func (d *pgxDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r := d.p.take(sql)
	if r == nil {
		return d.inner.QueryRow(ctx, sql, args...)
	}
	return errRow{d.fail(ctx, r, sql, args)}
}

// fail applies rule r to a query outside a transaction.
func (d *pgxDB) fail(ctx context.Context, r *rule, sql string, args []any) error {
	switch r.fault {
	case Before:
		return &Error{Rule: r.name, Fault: Before}
	case Data:
		return pgxDataError(ctx, d.inner)
	}
	rows, err := d.inner.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	rows.Close() // reads the reply to its end: the statement has run
	if err := rows.Err(); err != nil {
		return err
	}
	return &Error{Rule: r.name, Fault: After}
}

func (d *pgxDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.inner.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxTx{Tx: tx, p: d.p}, nil
}

// pgxDataError has the server refuse a statement for its data.
func pgxDataError(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if _, err := q.Exec(ctx, PostgresDataError); err != nil {
		return err
	}
	return &Error{Rule: "data", Fault: Data}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// pgxTx is a transaction of a wrapped db: an After fault in it loses the
// reply of its Commit.
type pgxTx struct {
	pgx.Tx
	p *Plan

	mu   sync.Mutex
	lose *rule
}

// Tx wraps a transaction the caller began itself (a handler's, for
// fence.Check and queue.CompleteTx): its statements fail as p's rules say.
func (p *Plan) Tx(tx pgx.Tx) pgx.Tx { return &pgxTx{Tx: tx, p: p} }

// take returns the rule that fails sql now (Before, Data), noting an
// After rule for the Commit.
func (t *pgxTx) take(sql string) *rule {
	r := t.p.take(sql)
	if r != nil && r.fault == After {
		t.mu.Lock()
		t.lose = r
		t.mu.Unlock()
		return nil
	}
	return r
}

func (t *pgxTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if r := t.take(sql); r != nil {
		return pgconn.CommandTag{}, t.fail(ctx, r)
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *pgxTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if r := t.take(sql); r != nil {
		return nil, t.fail(ctx, r)
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *pgxTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if r := t.take(sql); r != nil {
		return errRow{t.fail(ctx, r)}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *pgxTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if r := t.take("COPY " + table.Sanitize()); r != nil {
		return 0, t.fail(ctx, r)
	}
	return t.Tx.CopyFrom(ctx, table, cols, src)
}

// fail applies a Before or Data rule in the transaction: the statement is
// not sent; the server refuses a data error's statement, which aborts
// the transaction as the real one would.
func (t *pgxTx) fail(ctx context.Context, r *rule) error {
	if r.fault == Data {
		return pgxDataError(ctx, t.Tx)
	}
	return &Error{Rule: r.name, Fault: Before}
}

func (t *pgxTx) Commit(ctx context.Context) error {
	t.mu.Lock()
	lose := t.lose
	t.mu.Unlock()
	if r := t.p.take("COMMIT"); r != nil {
		if r.fault == After {
			lose = r
		} else {
			err := t.fail(ctx, r)
			_ = t.Tx.Rollback(ctx)
			return err
		}
	}
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if lose != nil {
		return &Error{Rule: lose.name, Fault: After}
	}
	return nil
}
