package elect

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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

var _ Board = (*SQLBoard)(nil)

// BoardConfig configures a SQLBoard. The zero value is valid.
type BoardConfig struct {
	// Table is the record table, optionally schema-qualified. Default
	// "aegis_leader".
	Table string
}

// SQLBoard is a Board in a PostgreSQL or SQLite table, one row per
// election, with expiry in store time. For a pgx pool, pass
// stdlib.OpenDBFromPool(pool).
type SQLBoard struct {
	db                      *sql.DB
	publish, withdraw, read string
}

// NewSQLBoard returns a Board on db (PostgreSQL or SQLite, detected),
// creating its table when it is missing. A nil cfg means defaults.
func NewSQLBoard(ctx context.Context, db *sql.DB, cfg *BoardConfig) (*SQLBoard, error) {
	if db == nil {
		return nil, invalid("elect: NewSQLBoard: db is nil")
	}
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
	return &SQLBoard{
		db:       db,
		publish:  fmt.Sprintf(q.publish, table),
		withdraw: fmt.Sprintf(q.withdraw, table),
		read:     fmt.Sprintf(q.read, table),
	}, nil
}

// Publish implements Board. One statement.
func (b *SQLBoard) Publish(ctx context.Context, election string, l Leader, ttl time.Duration) error {
	res, err := b.db.ExecContext(ctx, b.publish, election, l.Node, int64(l.Token), l.Since.UnixMicro(), ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("elect: publish %q: %w", election, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("elect: publish %q: %w", election, err)
	} else if n == 0 {
		return fmt.Errorf("%w: election %q has a record with a token greater than %d", aegis.ErrStale, election, l.Token)
	}
	return nil
}

// Withdraw implements Board. One statement.
func (b *SQLBoard) Withdraw(ctx context.Context, election string, token aegis.Token) error {
	if _, err := b.db.ExecContext(ctx, b.withdraw, election, int64(token)); err != nil {
		return fmt.Errorf("elect: withdraw %q: %w", election, err)
	}
	return nil
}

// Read implements Board. One statement.
func (b *SQLBoard) Read(ctx context.Context, election string) (Leader, error) {
	var (
		l     Leader
		token int64
		since int64
	)
	err := b.db.QueryRowContext(ctx, b.read, election).Scan(&l.Node, &token, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return Leader{}, nil
	}
	if err != nil {
		return Leader{}, fmt.Errorf("elect: read %q: %w", election, err)
	}
	l.Token, l.Since = aegis.Token(token), time.UnixMicro(since)
	return l, nil
}

// The record statements per dialect. %[1]s is the quoted table. since is
// the leader's own clock (for display); expiry is store time.
type boardSQL struct{ schema, publish, withdraw, read string }

var boardPostgres = boardSQL{
	schema: `CREATE TABLE IF NOT EXISTS %[1]s (
	election   text        PRIMARY KEY,
	node       text        NOT NULL,
	token      bigint      NOT NULL,
	since_us   bigint      NOT NULL,
	expires_at timestamptz NOT NULL
)`,
	publish: `INSERT INTO %[1]s AS b (election, node, token, since_us, expires_at)
VALUES ($1, $2, $3, $4, now() + $5 * interval '1 microsecond')
ON CONFLICT (election) DO UPDATE
SET node = excluded.node, token = excluded.token, since_us = excluded.since_us, expires_at = excluded.expires_at
WHERE b.token <= excluded.token -- fence: a deposed leader never overwrites its successor`,
	withdraw: `UPDATE %[1]s SET expires_at = '-infinity' WHERE election = $1 AND token = $2`,
	read:     `SELECT node, token, since_us FROM %[1]s WHERE election = $1 AND expires_at > now()`,
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
	read:     `SELECT node, token, since_us FROM %[1]s WHERE election = $1 AND expires_ms > ` + nowMS,
}
