package elect

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// Board is where a leader publishes its record and observers read it. The
// record is advisory (the lease decides who leads); a Board only has to
// keep a stale leader from overwriting a newer one's record.
type Board interface {
	// Publish records l as election's leader until ttl from now (store
	// time), unless a record with a greater token exists: then it writes
	// nothing and returns an error wrapping aegis.ErrStale.
	Publish(ctx context.Context, election string, l Leader, ttl time.Duration) error
	// Withdraw ends the record of the term with token, if it is still the
	// current one; otherwise it does nothing.
	Withdraw(ctx context.Context, election string, token aegis.Token) error
	// Read returns the live record, or the zero Leader when there is none
	// (never published, withdrawn or expired).
	Read(ctx context.Context, election string) (Leader, error)
}

// Watcher is a Board that can tell its observers at once that a record
// changed, so that Observe need not poll it. Observe finds it by type
// assertion on Config.Board.
type Watcher interface {
	// Watch subscribes to election's record. Once it has returned, every
	// Publish that changes the leader or term and every Withdraw, from any
	// process, sends on the channel (a send may stand for several changes,
	// and may come with no change). The channel is closed when ctx ends or
	// the subscription is lost (a connection dropped): changes may then
	// have been missed, and the caller reads the record and watches again.
	// An error wrapping errors.ErrUnsupported means this Board cannot push
	// (it has to be polled); any other error is the store's.
	Watch(ctx context.Context, election string) (<-chan struct{}, error)
}

// ExpiryReader is a Board whose records expire without a word to their
// watchers (a crashed leader's record on PostgreSQL): ReadExpiry tells how
// long the record read lives unless refreshed, so that Observe, woken by no
// one, reads it again when it expires. Observe finds it by type assertion.
type ExpiryReader interface {
	// ReadExpiry is Read, with how long the record stays live unless it
	// is refreshed, measured by the store (zero with the zero Leader).
	ReadExpiry(ctx context.Context, election string) (Leader, time.Duration, error)
}

var (
	_ Board        = (*SQLBoard)(nil)
	_ Watcher      = (*SQLBoard)(nil)
	_ ExpiryReader = (*SQLBoard)(nil)
)

// BoardConfig configures a SQLBoard. The zero value is valid.
type BoardConfig struct {
	// Table is the record table, optionally schema-qualified. Default
	// "aegis_leader".
	Table string
}

// SQLBoard is a Board in a PostgreSQL or SQLite table, one row per
// election, with expiry in store time.
//
// On PostgreSQL it is a Watcher: Publish (when the leader or term changes)
// and Withdraw notify in the same statement (NOTIFY, on a channel named
// for the table), and each Watch listens on a connection of its own, made
// from the handle's connection settings (a pool's with its BeforeConnect
// and AfterConnect; a *sql.DB's copied from one of its connections, with
// no hook run again). It takes no slot of the caller's pool, so each
// Observe is one server connection more than the pool's MaxConns. That needs the pgx driver: a *sql.DB from
// stdlib.OpenDBFromPool, sql.Open("pgx", ...) or NewSQLBoardFromPool; with
// another driver, or on SQLite (no notification reaches another process),
// Watch returns an error wrapping errors.ErrUnsupported and Observe polls.
type SQLBoard struct {
	db                      *sql.DB       // nil when made by NewSQLBoardFromPool
	pool                    *pgxpool.Pool // nil when made by NewSQLBoard
	channel                 string        // the NOTIFY channel; empty on SQLite
	publish, withdraw, read string
}

// NewSQLBoard returns a Board on db (PostgreSQL or SQLite, detected),
// creating its table when it is missing. A nil cfg means defaults. A nil
// db or a bad BoardConfig.Table is an error wrapping aegis.ErrInvalid;
// otherwise an error is the store's.
func NewSQLBoard(ctx context.Context, db *sql.DB, cfg *BoardConfig) (*SQLBoard, error) {
	if db == nil {
		return nil, invalid("elect: NewSQLBoard: db is nil")
	}
	return newSQLBoard(ctx, db, cfg)
}

// NewSQLBoardFromPool is NewSQLBoard on a PostgreSQL pgx pool, for a
// program that holds no *sql.DB: its statements run on the pool, which it
// never closes (close the pool after the board's last use). A nil pool is
// an error wrapping aegis.ErrInvalid.
func NewSQLBoardFromPool(ctx context.Context, pool *pgxpool.Pool, cfg *BoardConfig) (*SQLBoard, error) {
	if pool == nil {
		return nil, invalid("elect: NewSQLBoardFromPool: pool is nil")
	}
	// The migration's lock and record are written over database/sql: a
	// bridge for the set-up only. Closing it leaves the pool open.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	b, err := newSQLBoard(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	b.db, b.pool = nil, pool
	return b, nil
}

func newSQLBoard(ctx context.Context, db *sql.DB, cfg *BoardConfig) (*SQLBoard, error) {
	var c BoardConfig
	if cfg != nil {
		c = *cfg
	}
	c.Table = cmp.Or(c.Table, "aegis_leader")
	table, err := migrate.Table("elect: BoardConfig.Table", c.Table)
	if err != nil {
		return nil, invalid("%w", err)
	}
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("elect: board: %w", err)
	}
	q := boardPostgres
	if d == migrate.SQLite {
		q = boardSQLite
	}
	ms := []migrate.Migration{{Version: 1, SQL: fmt.Sprintf(q.schema, table)}}
	if err := migrate.Apply(ctx, db, d, "elect-board:"+c.Table, ms); err != nil {
		return nil, fmt.Errorf("elect: board: %w", err)
	}
	b := &SQLBoard{db: db}
	if d == migrate.Postgres {
		// The table's oid names the channel: unique in the database, the
		// same in every process that resolves the name to this table (two
		// schemas' aegis_leader tables do not wake each other's observers).
		var oid uint32
		if err := db.QueryRowContext(ctx, `SELECT $1::regclass::oid`, table).Scan(&oid); err != nil {
			return nil, fmt.Errorf("elect: board: %w", err)
		}
		b.channel = fmt.Sprintf("aegis_elect_%d", oid)
	}
	b.publish = fmt.Sprintf(q.publish, table, b.channel)
	b.withdraw = fmt.Sprintf(q.withdraw, table, b.channel)
	b.read = fmt.Sprintf(q.read, table)
	return b, nil
}

// Publish implements Board. One statement, which also notifies the
// watchers (PostgreSQL) when the record's leader or term changes; a
// refresh of the same term notifies no one.
func (b *SQLBoard) Publish(ctx context.Context, election string, l Leader, ttl time.Duration) error {
	n, err := b.exec(ctx, b.publish, election, l.Node, int64(l.Token), l.Since.UnixMicro(), ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("elect: publish %q: %w", election, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: election %q has a record with a token greater than %d", aegis.ErrStale, election, l.Token)
	}
	return nil
}

// Withdraw implements Board. One statement, which also notifies the
// watchers (PostgreSQL) when it ends a live record.
func (b *SQLBoard) Withdraw(ctx context.Context, election string, token aegis.Token) error {
	if _, err := b.exec(ctx, b.withdraw, election, int64(token)); err != nil {
		return fmt.Errorf("elect: withdraw %q: %w", election, err)
	}
	return nil
}

// Read implements Board. One statement.
func (b *SQLBoard) Read(ctx context.Context, election string) (Leader, error) {
	l, _, err := b.ReadExpiry(ctx, election)
	return l, err
}

// ReadExpiry implements ExpiryReader. One statement.
func (b *SQLBoard) ReadExpiry(ctx context.Context, election string) (Leader, time.Duration, error) {
	var (
		l            Leader
		token, since int64
		left         int64
	)
	var err error
	if b.pool != nil {
		err = b.pool.QueryRow(ctx, b.read, election).Scan(&l.Node, &token, &since, &left)
	} else {
		err = b.db.QueryRowContext(ctx, b.read, election).Scan(&l.Node, &token, &since, &left)
	}
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return Leader{}, 0, nil
	}
	if err != nil {
		return Leader{}, 0, fmt.Errorf("elect: read %q: %w", election, err)
	}
	l.Token, l.Since = aegis.Token(token), time.UnixMicro(since)
	return l, time.Duration(left) * time.Microsecond, nil
}

// exec runs a statement on the board's handle and returns the rows it
// affected (returned, for a statement ending in a SELECT).
func (b *SQLBoard) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if b.pool != nil {
		tag, err := b.pool.Exec(ctx, query, args...)
		return tag.RowsAffected(), err
	}
	res, err := b.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// watchConnect bounds the connection and LISTEN of a Watch.
const watchConnect = 10 * time.Second

// Watch implements Watcher on PostgreSQL: it opens a connection of its own
// (closed when the watch ends) and listens on the board's channel, where
// Publish and Withdraw send the election's name. On SQLite, or through a
// *sql.DB whose driver is not pgx, it returns an error wrapping
// errors.ErrUnsupported.
func (b *SQLBoard) Watch(ctx context.Context, election string) (<-chan struct{}, error) {
	if b.channel == "" {
		return nil, fmt.Errorf("elect: watch %q: %w: SQLite notifies no other process; poll", election, errors.ErrUnsupported)
	}
	cctx, cancel := context.WithTimeout(ctx, watchConnect)
	defer cancel()
	cfg, err := b.connConfig(cctx)
	if err != nil {
		return nil, fmt.Errorf("elect: watch %q: %w", election, err)
	}
	// A copied config holds the handler of the connection it was copied
	// from: pgx sets its own, buffering for WaitForNotification, when nil.
	cfg.OnNotification = nil
	// A pool's connections are made with its hooks (a rotated password,
	// a role or search_path set once connected): so is this one.
	var pc *pgxpool.Config
	if b.pool != nil {
		pc = b.pool.Config()
	}
	if pc != nil && pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(cctx, cfg); err != nil {
			return nil, fmt.Errorf("elect: watch %q: the pool's BeforeConnect: %w", election, err)
		}
	}
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		// Its cause only: pgx's text names the user and the database.
		if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok && ce.Unwrap() != nil {
			err = ce.Unwrap()
		}
		return nil, fmt.Errorf("elect: watch %q: connect: %w", election, err)
	}
	closeConn := func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(c)
	}
	if pc != nil && pc.AfterConnect != nil {
		if err := pc.AfterConnect(cctx, conn); err != nil {
			closeConn()
			return nil, fmt.Errorf("elect: watch %q: the pool's AfterConnect: %w", election, err)
		}
	}
	if _, err := conn.Exec(cctx, "LISTEN "+b.channel); err != nil {
		closeConn()
		return nil, fmt.Errorf("elect: watch %q: listen: %w", election, err)
	}
	wake := make(chan struct{}, 1)
	go func() {
		defer close(wake)
		defer closeConn()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return // ctx ended or the connection broke: the watcher reads and watches again
			}
			if n != nil && n.Payload == election {
				select {
				case wake <- struct{}{}:
				default: // a wake is pending: it covers this change too
				}
			}
		}
	}()
	return wake, nil
}

// connConfig is the settings of the handle's connections, for a connection
// of Watch's own.
func (b *SQLBoard) connConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	if b.pool != nil {
		return b.pool.Config().ConnConfig.Copy(), nil
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			cfg = c.Conn().Config().Copy()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: the *sql.DB's driver is not pgx, which LISTEN needs; poll", errors.ErrUnsupported)
	}
	return cfg, nil
}

// The record statements per dialect. %[1]s is the quoted table, %[2]s the
// NOTIFY channel (PostgreSQL). since is the leader's own clock (for
// display); expiry is store time. read's fourth column is the record's
// time left, in microseconds.
type boardSQL struct{ schema, publish, withdraw, read string }

var boardPostgres = boardSQL{
	schema: `CREATE TABLE IF NOT EXISTS %[1]s (
	election   text        PRIMARY KEY,
	node       text        NOT NULL,
	token      bigint      NOT NULL,
	since_us   bigint      NOT NULL,
	expires_at timestamptz NOT NULL
)`,
	// old is read from the statement's snapshot: the record before the
	// upsert. A refresh of the live term notifies no one (observers would
	// read for nothing every TTL/3); a new leader or term does, on commit.
	publish: `WITH old AS (
	SELECT token FROM %[1]s WHERE election = $1 AND expires_at > now()
), up AS (
	INSERT INTO %[1]s AS b (election, node, token, since_us, expires_at)
	VALUES ($1, $2, $3, $4, now() + $5 * interval '1 microsecond')
	ON CONFLICT (election) DO UPDATE
	SET node = excluded.node, token = excluded.token, since_us = excluded.since_us, expires_at = excluded.expires_at
	WHERE b.token <= excluded.token -- fence: a deposed leader never overwrites its successor
	RETURNING election, token
)
SELECT CASE WHEN up.token IS DISTINCT FROM (SELECT token FROM old) THEN pg_notify('%[2]s', up.election) END FROM up`,
	withdraw: `WITH w AS (
	UPDATE %[1]s SET expires_at = '-infinity'
	WHERE election = $1 AND token = $2 AND expires_at > now() -- a live record: an expired one changes nothing
	RETURNING election
)
SELECT pg_notify('%[2]s', election) FROM w`,
	read: `SELECT node, token, since_us, (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE election = $1 AND expires_at > now()`,
}

// nowMS is SQLite's current time in milliseconds.
const nowMS = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

var boardSQLite = boardSQL{
	schema: `CREATE TABLE IF NOT EXISTS %[1]s (
	election   TEXT    PRIMARY KEY,
	node       TEXT    NOT NULL,
	token      INTEGER NOT NULL,
	since_us   INTEGER NOT NULL,
	expires_ms INTEGER NOT NULL
) WITHOUT ROWID`,
	publish: `INSERT INTO %[1]s AS b (election, node, token, since_us, expires_ms)
VALUES ($1, $2, $3, $4, ` + nowMS + ` + $5 / 1000)
ON CONFLICT (election) DO UPDATE
SET node = excluded.node, token = excluded.token, since_us = excluded.since_us, expires_ms = excluded.expires_ms
WHERE b.token <= excluded.token -- fence: a deposed leader never overwrites its successor`,
	withdraw: `UPDATE %[1]s SET expires_ms = 0 WHERE election = $1 AND token = $2`,
	read: `SELECT node, token, since_us, (expires_ms - ` + nowMS + `) * 1000
FROM %[1]s WHERE election = $1 AND expires_ms > ` + nowMS,
}
