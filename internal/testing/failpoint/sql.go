package failpoint

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
)

// DB opens a database/sql handle on c whose statements fail as p's rules
// say. dataSQL is the statement that makes the server refuse a statement
// for its data (PostgresDataError or SQLiteDataError).
func (p *Plan) DB(c driver.Connector, dataSQL string) *sql.DB {
	return sql.OpenDB(&connector{inner: c, p: p, data: dataSQL})
}

// DSN is a connector for a driver and a data source name, for drivers
// without a connector of their own (modernc.org/sqlite).
func DSN(d driver.Driver, name string) driver.Connector { return dsnConnector{d, name} }

type dsnConnector struct {
	d    driver.Driver
	name string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.name) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

type connector struct {
	inner driver.Connector
	p     *Plan
	data  string
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{inner: dc, c: c}, nil
}

func (c *connector) Driver() driver.Driver { return c.inner.Driver() }

// conn applies the plan to one driver connection. After a Before or After
// fault it is broken, as the real connection would be: database/sql
// discards it when it comes back to the pool (IsValid).
type conn struct {
	inner  driver.Conn
	c      *connector
	inTx   bool  // inside BEGIN … COMMIT sent as text, or a BeginTx
	lose   *rule // an After fault inside the transaction: its COMMIT's reply is lost
	broken bool
}

var (
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
)

// Unwrap returns the driver's connection (for code that needs its type:
// LISTEN through pgx's stdlib connection).
func (c *conn) Unwrap() driver.Conn { return c.inner }

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var s driver.Stmt
	var err error
	if pc, ok := c.inner.(driver.ConnPrepareContext); ok {
		s, err = pc.PrepareContext(ctx, query)
	} else {
		s, err = c.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &stmt{inner: s, c: c, query: query}, nil
}

func (c *conn) Close() error { return c.inner.Close() }

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var tx driver.Tx
	var err error
	if bc, ok := c.inner.(driver.ConnBeginTx); ok {
		tx, err = bc.BeginTx(ctx, opts)
	} else {
		tx, err = c.inner.Begin() //lint:ignore SA1019 the driver's only way to begin
	}
	if err != nil {
		return nil, err
	}
	c.inTx, c.lose = true, nil
	return &txn{inner: tx, c: c}, nil
}

type txn struct {
	inner driver.Tx
	c     *conn
}

func (t *txn) Commit() error {
	lose := t.c.lose
	t.c.inTx, t.c.lose = false, nil
	if err := t.inner.Commit(); err != nil {
		return err
	}
	if lose != nil {
		t.c.broken = true
		return &Error{Rule: lose.name, Fault: After}
	}
	return nil
}

func (t *txn) Rollback() error {
	t.c.inTx, t.c.lose = false, nil
	return t.inner.Rollback()
}

// fault decides what happens to query: nil to run it as asked, or the
// rule that fails it. A statement that begins, commits or rolls back a
// transaction sent as text moves the connection's state.
func (c *conn) fault(query string) *rule {
	r := c.c.p.take(query)
	switch {
	case isBegin(query):
		c.inTx, c.lose = true, nil
	case isRollback(query):
		c.inTx, c.lose = false, nil
	}
	return r
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.execRule(ctx, query, func() (driver.Result, error) { return c.exec(ctx, query, args) })
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.queryRule(ctx, query, func() (driver.Rows, error) { return c.query(ctx, query, args) })
}

// early applies a Before or a Data rule: the statement is not sent, and
// done is true; an After rule is the caller's to apply.
func (c *conn) early(ctx context.Context, r *rule) (err error, done bool) {
	switch r.fault {
	case Before:
		c.broken = true
		return &Error{Rule: r.name, Fault: Before}, true
	case Data:
		return c.dataError(ctx), true
	}
	return nil, false
}

// execRule runs exec, a statement without rows, under the plan: a COMMIT
// loses its reply when an After rule matched a statement of its
// transaction.
func (c *conn) execRule(ctx context.Context, query string, exec func() (driver.Result, error)) (driver.Result, error) {
	r := c.fault(query)
	if r != nil {
		if err, done := c.early(ctx, r); done {
			return nil, err
		}
	}
	commit := isCommit(query)
	lose := c.lose
	res, err := exec()
	if commit {
		c.inTx, c.lose = false, nil
	}
	if err != nil {
		return nil, err
	}
	switch {
	case r != nil && c.inTx: // After inside a transaction: its commit's reply is lost
		c.lose = r
	case r != nil:
		c.broken = true
		return nil, &Error{Rule: r.name, Fault: After}
	case commit && lose != nil:
		c.broken = true
		return nil, &Error{Rule: lose.name, Fault: After}
	}
	return res, nil
}

// queryRule runs query, a statement with rows, under the plan.
func (c *conn) queryRule(ctx context.Context, q string, query func() (driver.Rows, error)) (driver.Rows, error) {
	r := c.fault(q)
	if r == nil {
		return query()
	}
	if err, done := c.early(ctx, r); done {
		return nil, err
	}
	rows, err := query()
	if err != nil {
		return nil, err
	}
	if c.inTx { // After inside a transaction: its commit's reply is lost
		c.lose = r
		return rows, nil
	}
	if err := drain(rows); err != nil {
		return nil, err
	}
	c.broken = true
	return nil, &Error{Rule: r.name, Fault: After}
}

func (c *conn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if ec, ok := c.inner.(driver.ExecerContext); ok {
		return ec.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *conn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if qc, ok := c.inner.(driver.QueryerContext); ok {
		return qc.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

// dataError has the server refuse a statement for its data.
func (c *conn) dataError(ctx context.Context) error {
	rows, err := c.query(ctx, c.c.data, nil)
	if err != nil {
		return err
	}
	if err := drain(rows); err != nil {
		return err
	}
	return errors.New("failpoint: the data error's statement did not fail: " + c.c.data)
}

// drain reads rows to their end, as the statement's reply would be read,
// and closes them.
func drain(rows driver.Rows) error {
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	for {
		if err := rows.Next(dest); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func (c *conn) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := c.inner.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *conn) ResetSession(ctx context.Context) error {
	if c.broken {
		return driver.ErrBadConn
	}
	if rs, ok := c.inner.(driver.SessionResetter); ok {
		return rs.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if c.broken {
		return false
	}
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// stmt applies the plan to a prepared statement's executions.
type stmt struct {
	inner driver.Stmt
	c     *conn
	query string
}

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, errors.New("failpoint: Stmt.Exec without a context is not supported")
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, errors.New("failpoint: Stmt.Query without a context is not supported")
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	sc, ok := s.inner.(driver.StmtExecContext)
	if !ok {
		return nil, errors.New("failpoint: the driver's statement has no ExecContext")
	}
	return s.c.execRule(ctx, s.query, func() (driver.Result, error) { return sc.ExecContext(ctx, args) })
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	sc, ok := s.inner.(driver.StmtQueryContext)
	if !ok {
		return nil, errors.New("failpoint: the driver's statement has no QueryContext")
	}
	return s.c.queryRule(ctx, s.query, func() (driver.Rows, error) { return sc.QueryContext(ctx, args) })
}
