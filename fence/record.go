package fence

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/actor"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/outcome"
)

// The refusal log: one row per refusal the fence recorded itself (see
// record), the newest LogKept of each resource kept. Version 4 of the
// fence's migrations, its indexes 5 and 6.
const (
	migrateLogSQL = `CREATE TABLE IF NOT EXISTS aegis_fence_refusal_log (
	id        text   PRIMARY KEY, -- its time in ns, then random: a record whose reply was lost is read back by it
	resource  text   NOT NULL,
	token     bigint NOT NULL, -- the token refused (0: not known, fence.Exec outside a scheduled run)
	held      bigint NOT NULL, -- the token the fence held then (0: not known)
	lease_key text   NOT NULL, -- the refused lease's key (CheckLease; '': none)
	node      text   NOT NULL, -- the writer's node, when a scheduler runs it ('': not known)
	schedule  text   NOT NULL, -- the schedule whose tick it ran ('': none)
	fire_ms   bigint NOT NULL, -- that tick's fire time, Unix ms (0: none)
	attempt   bigint NOT NULL, -- that tick's attempt (0: none)
	trace_id  text   NOT NULL, -- the trace of the refused write ('': none)
	at_ms     bigint NOT NULL  -- when, Unix ms of the refused process
)`
	migrateLogAtSQL       = `CREATE INDEX IF NOT EXISTS aegis_fence_refusal_log_at ON aegis_fence_refusal_log (at_ms)`
	migrateLogResourceSQL = `CREATE INDEX IF NOT EXISTS aegis_fence_refusal_log_resource ON aegis_fence_refusal_log (resource, at_ms)`

	insertLogSQL = `INSERT INTO aegis_fence_refusal_log (id, resource, token, held, lease_key, node, schedule, fire_ms, attempt, trace_id, at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
	// pruneLogSQL keeps the newest LogKept rows of a resource: those after
	// its LogKept-th newest ($2 = LogKept-1), by time, then id.
	pruneLogSQL = `DELETE FROM aegis_fence_refusal_log WHERE resource = $1
AND (at_ms, id) < (SELECT at_ms, id FROM aegis_fence_refusal_log WHERE resource = $1 ORDER BY at_ms DESC, id DESC LIMIT 1 OFFSET $2)`
	// loggedSQL reads back a record whose reply was lost.
	loggedSQL = `SELECT count(*) FROM aegis_fence_refusal_log WHERE id = $1`

	// The identity of the database a *sql.Tx is on, to find a *sql.DB of
	// it (see sqlDBs): PostgreSQL's first, which SQLite answers with an
	// error that leaves its transaction as it was (PostgreSQL's would be
	// aborted by SQLite's question).
	pgIdentitySQL     = `SELECT 'postgres|' || current_database() || '|' || coalesce(host(inet_server_addr()), '') || '|' || coalesce(inet_server_port(), 0) || '|' || coalesce(current_schema(), '')`
	sqliteIdentitySQL = `SELECT 'sqlite|' || file FROM pragma_database_list WHERE name = 'main'`
)

// LogKept is how many refusals of each resource the refusal log keeps:
// the newest. The refusal table's count goes on beyond it.
const LogKept = 100

// Bounds of a record.
const (
	// recordTimeout bounds a record: the connection, the write, the read
	// back of a lost reply.
	recordTimeout = 2 * time.Second
	// recordsAtOnce bounds the records in flight in the process, so that a
	// storm of refusals cannot open a storm of connections.
	recordsAtOnce = 4
	// sqlDBsKept bounds the *sql.DBs the process remembers.
	sqlDBsKept = 32
)

var recording = make(chan struct{}, recordsAtOnce)

// ErrNotRecorded is what StaleError.RecordErr wraps: the fence refused a
// write and could not record the refusal. The refusal stands.
var ErrNotRecorded = errors.New("fence: refusal not recorded")

// record is one refusal, as the log stores it.
type record struct {
	id          string
	resource    string
	token, held int64
	key         string
	w           actor.Writer
	traceID     string
	at          time.Time
	t           tables // where it is written
}

// newRecord is the record of refusal e, made in the refused write's ctx:
// its writer (internal/actor, set by a scheduler's handler) and its trace.
// Every text goes through errtext: a name a driver accepted may still be
// one the log's store refuses.
func newRecord(ctx context.Context, t tables, e *StaleError, key string) record {
	// The id orders a process's refusals of one millisecond (the log is
	// read, and pruned, by time then id) and is random past that.
	now := time.Now()
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	w, _ := actor.From(ctx)
	w.Node, w.Schedule = errtext.Clean(w.Node), errtext.Clean(w.Schedule)
	r := record{id: fmt.Sprintf("%016x", now.UnixNano()) + hex.EncodeToString(b[:]), resource: e.Resource, token: int64(e.Token), held: int64(e.Held), key: errtext.Clean(key), w: w, at: now, t: t}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.traceID = sc.TraceID().String()
	}
	return r
}

func (r record) args() []any {
	var fire int64
	if !r.w.Fire.IsZero() {
		fire = r.w.Fire.UnixMilli()
	}
	return []any{r.id, r.resource, r.token, r.held, r.key, r.w.Node, r.w.Schedule, fire, int64(r.w.Attempt), r.traceID, r.at.UnixMilli()}
}

// recordDB is a handle a record is written through: a pgx connection or
// pool, or a *sql.DB.
type recordDB interface {
	begin(ctx context.Context) (querier, func(context.Context) error, func(context.Context), error)
	queryRow(ctx context.Context, query string, args ...any) scanner
}

// pgxHandle is what a record needs of pgx: a *pgx.Conn, a *pgxpool.Pool.
type pgxHandle interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgxRecordDB struct{ h pgxHandle }

func (d pgxRecordDB) begin(ctx context.Context) (querier, func(context.Context) error, func(context.Context), error) {
	tx, err := d.h.Begin(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return pgxTx{tx}, tx.Commit, func(ctx context.Context) { _ = tx.Rollback(ctx) }, nil
}

func (d pgxRecordDB) queryRow(ctx context.Context, query string, args ...any) scanner {
	return d.h.QueryRow(ctx, query, args...)
}

type sqlRecordDB struct{ db *sql.DB }

func (d sqlRecordDB) begin(ctx context.Context) (querier, func(context.Context) error, func(context.Context), error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	return sqlTx{tx}, func(context.Context) error { return tx.Commit() }, func(context.Context) { _ = tx.Rollback() }, nil
}

func (d sqlRecordDB) queryRow(ctx context.Context, query string, args ...any) scanner {
	return d.db.QueryRowContext(ctx, query, args...)
}

// write writes r in one transaction of db: its row of the log, its count
// in the refusal table, the log's pruning. A failure whose reply may have
// been lost (not the server's answer) is resolved by reading r's row back
// through again (a fresh connection: the failed one may be broken).
func (r record) write(ctx context.Context, db recordDB, again func(ctx context.Context) (recordDB, func(), error)) error {
	err := r.tryWrite(ctx, db)
	if err == nil || !outcome.MaybeLanded(err) {
		return err
	}
	db2, done, aerr := again(ctx)
	if aerr != nil {
		return fmt.Errorf("%w (reading back whether it landed: %v)", err, aerr)
	}
	defer done()
	var n int
	if rerr := db2.queryRow(ctx, r.t.sql(loggedSQL), r.id).Scan(&n); rerr != nil {
		return fmt.Errorf("%w (reading back whether it landed: %v)", err, rerr)
	}
	if n > 0 {
		return nil // it landed; only its reply was lost
	}
	return err
}

func (r record) tryWrite(ctx context.Context, db recordDB) error {
	tx, commit, rollback, err := db.begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.exec(ctx, r.t.sql(insertLogSQL), r.args()...); err != nil {
		rollback(ctx)
		return err
	}
	if _, err := tx.exec(ctx, r.t.sql(countRefusalSQL), r.resource, r.token, r.held, r.at.UnixMilli()); err != nil {
		rollback(ctx)
		return err
	}
	if _, err := tx.exec(ctx, r.t.sql(pruneLogSQL), r.resource, LogKept-1); err != nil {
		rollback(ctx)
		return err
	}
	return commit(ctx)
}

// recordBounded runs write within the process's bound of records in
// flight and recordTimeout, on a context that the refused write's
// cancellation does not end (a lost lease cancels a handler's context: its
// refusals are the ones to record).
func recordBounded(ctx context.Context, write func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	select {
	case recording <- struct{}{}:
		defer func() { <-recording }()
	case <-ctx.Done():
		return fmt.Errorf("%d refusals were being recorded already for %s", recordsAtOnce, recordTimeout)
	}
	return write(ctx)
}

// recorded marks e recorded, or says why not: the refusal stands either way.
func (e *StaleError) recorded(t tables, err error) {
	if err == nil {
		e.Recorded = true
		return
	}
	if missingLogTable(err) {
		err = fmt.Errorf("table %s does not exist: %s to upgrade the fence's schema: %w", t.table("aegis_fence_refusal_log"), t.migrateHint(), err)
	}
	e.RecordErr = fmt.Errorf("%w: %w", ErrNotRecorded, err)
}

func missingLogTable(err error) bool { return missingTable(err) }

// dialPgx connects for a record from a refused transaction's config; a
// test replaces it to make the record's statements fail.
var dialPgx = func(ctx context.Context, cfg *pgx.ConnConfig) (pgxHandle, func(), error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		// Its cause only: pgx's text names the user and the database, and
		// a refusal's error can end up on a page (an attempt's error).
		if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok && ce.Unwrap() != nil {
			err = fmt.Errorf("connect: %w", ce.Unwrap())
		}
		return nil, nil, err
	}
	return conn, func() {
		// Its own bound: the record's may have run out, and a close that
		// hangs would hold a slot of recordsAtOnce for ever.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}, nil
}

// recordPgx records e from a pgx handle of the refused write (a
// transaction, a connection, a pool): on a connection of its own, made
// from the handle's connection's config, since the refused transaction
// rolls back; on the pool itself for a pool.
func recordPgx(ctx context.Context, t tables, h any, e *StaleError, key string) {
	r := newRecord(ctx, t, e, key)
	var dial func(ctx context.Context) (recordDB, func(), error)
	switch h := h.(type) {
	case *pgxpool.Pool:
		dial = func(context.Context) (recordDB, func(), error) { return pgxRecordDB{h}, func() {}, nil }
	case interface{ Conn() *pgx.Conn }: // pgx.Tx, *pgxpool.Conn
		if c := h.Conn(); c != nil {
			dial = dialFrom(c)
		}
	case *pgx.Conn:
		if h != nil {
			dial = dialFrom(h)
		}
	}
	if dial == nil {
		e.recorded(t, fmt.Errorf("the fence cannot reach the database from a %T: pass a pgx.Tx, *pgx.Conn or *pgxpool.Pool", h))
		return
	}
	e.recorded(t, recordBounded(ctx, func(ctx context.Context) error {
		db, done, err := dial(ctx)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer done()
		return r.write(ctx, db, dial)
	}))
}

func dialFrom(c *pgx.Conn) func(ctx context.Context) (recordDB, func(), error) {
	cfg := c.Config().Copy()
	return func(ctx context.Context) (recordDB, func(), error) {
		h, done, err := dialPgx(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return pgxRecordDB{h}, done, nil
	}
}

// sqlDBs are the *sql.DBs this process gave the fence (MigrateSQL,
// RecordRefusalsOn), by the identity of their database: where a refusal
// in a *sql.Tx, which cannot reach its pool, is recorded. Newest last, at
// most sqlDBsKept.
var sqlDBs struct {
	mu  sync.Mutex
	dbs []knownDB
}

type knownDB struct {
	db *sql.DB
	id string
}

// RecordRefusalsOn tells the fence that db is a handle of its database in
// this process, for the refusals of CheckSQL, CheckLeaseSQL and ExecSQL in
// a *sql.Tx of that database (a *sql.Tx cannot reach its pool): they are
// recorded through db. MigrateSQL does it too; call RecordRefusalsOn where
// the schema is migrated elsewhere (a deploy step). A database is known by
// its identity: on PostgreSQL its database, server address and port and
// current schema, on SQLite its main file (an in-memory database has none
// and is never matched). At most 32 handles are remembered, the newest;
// a closed one is passed over. A nil db is an error wrapping
// aegis.ErrInvalid; a failed query of its identity is returned.
func RecordRefusalsOn(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return fmt.Errorf("%w: fence: record refusals on: db is nil", aegis.ErrInvalid)
	}
	id, err := identity(ctx, db)
	if err != nil {
		return fmt.Errorf("fence: record refusals on: %w", err)
	}
	sqlDBs.mu.Lock()
	defer sqlDBs.mu.Unlock()
	sqlDBs.dbs = deleteDB(sqlDBs.dbs, db)
	sqlDBs.dbs = append(sqlDBs.dbs, knownDB{db: db, id: id})
	if n := len(sqlDBs.dbs); n > sqlDBsKept {
		sqlDBs.dbs = sqlDBs.dbs[n-sqlDBsKept:]
	}
	return nil
}

func deleteDB(dbs []knownDB, db *sql.DB) []knownDB {
	out := dbs[:0]
	for _, k := range dbs {
		if k.db != db {
			out = append(out, k)
		}
	}
	return out
}

// rowQuerier is a *sql.DB, *sql.Conn or *sql.Tx.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// identity is the database q is on, "" when it has none to match by (an
// SQLite database in memory).
func identity(ctx context.Context, q rowQuerier) (string, error) {
	var id string
	pgErr := q.QueryRowContext(ctx, pgIdentitySQL).Scan(&id)
	if pgErr == nil {
		return id, nil
	}
	if err := q.QueryRowContext(ctx, sqliteIdentitySQL).Scan(&id); err != nil {
		return "", fmt.Errorf("the database's identity: %w (as PostgreSQL: %v)", err, pgErr)
	}
	if id == "sqlite|" {
		return "", nil
	}
	return id, nil
}

// recordSQL records e from a database/sql handle of the refused write.
// A *sql.DB records on itself. A *sql.Tx or *sql.Conn is matched to a
// *sql.DB of its database (RecordRefusalsOn). On SQLite, a refused
// *sql.Tx holds the database's write lock, which the record on another
// connection would wait for until its caller rolls back, that is forever:
// so the fence rolls it back first (the caller's own Rollback then
// returns sql.ErrTxDone), when it has a handle to record through.
func recordSQL(ctx context.Context, t tables, h SQLExecer, e *StaleError, key string) {
	r := newRecord(ctx, t, e, key)
	e.recorded(t, recordBounded(ctx, func(ctx context.Context) error {
		var candidates []*sql.DB
		if db, ok := h.(*sql.DB); ok {
			candidates = []*sql.DB{db}
		} else {
			q, ok := h.(rowQuerier)
			if !ok {
				return fmt.Errorf("fence.ExecSQL cannot reach the database from a %T: pass a *sql.DB, *sql.Conn or *sql.Tx", h)
			}
			id, err := identity(ctx, q)
			if err != nil {
				return err
			}
			if candidates = openDBs(ctx, knownDBs(id)); len(candidates) == 0 {
				return errNoHandle
			}
			if tx, ok := h.(*sql.Tx); ok && strings.HasPrefix(id, "sqlite|") {
				_ = tx.Rollback() // refused: the caller rolls back anyway
			}
		}
		for _, db := range candidates {
			d := sqlRecordDB{db}
			if err := r.write(ctx, d, func(context.Context) (recordDB, func(), error) { return d, func() {}, nil }); err == nil || !closed(err) {
				return err
			}
			forget(db) // closed since openDBs
		}
		return errNoHandle
	}))
}

var errNoHandle = errors.New("no open *sql.DB of this database was given to fence.MigrateSQL or fence.RecordRefusalsOn in this process")

// openDBs are dbs without the closed ones, which it forgets.
func openDBs(ctx context.Context, dbs []*sql.DB) []*sql.DB {
	out := dbs[:0]
	for _, db := range dbs {
		if err := db.PingContext(ctx); err != nil && closed(err) {
			forget(db)
			continue
		}
		out = append(out, db)
	}
	return out
}

// knownDBs are the remembered handles of database id, newest first.
func knownDBs(id string) []*sql.DB {
	if id == "" {
		return nil
	}
	sqlDBs.mu.Lock()
	defer sqlDBs.mu.Unlock()
	var out []*sql.DB
	for i := len(sqlDBs.dbs) - 1; i >= 0; i-- {
		if sqlDBs.dbs[i].id == id {
			out = append(out, sqlDBs.dbs[i].db)
		}
	}
	return out
}

func forget(db *sql.DB) {
	sqlDBs.mu.Lock()
	defer sqlDBs.mu.Unlock()
	sqlDBs.dbs = deleteDB(sqlDBs.dbs, db)
}

// closed reports database/sql's error of a closed *sql.DB, which has no
// sentinel.
func closed(err error) bool { return strings.Contains(err.Error(), "sql: database is closed") }
