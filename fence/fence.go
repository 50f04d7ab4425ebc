// Package fence is the storage-side half of fencing: the store of record
// checks a lease's token in the same transaction as the business write, so
// a holder that was paused past its lease (and replaced by a holder with a
// greater token) changes nothing.
//
// Three forms, for three kinds of stores:
//
//   - CheckLease / CheckLeaseSQL record the greatest token accepted per
//     resource in the aegis_fence table, with a hash of the lease's owner. A
//     write with a lower token, or with the same token from another owner
//     (two holders granted one token: a Redis failover that sent the
//     counter back), gets ErrStale and the caller rolls back; the error is
//     a *StaleError that says which token the table held. The same
//     holder may write many times with one lease. Check / CheckSQL do the
//     same for a bare token that comes without a lease (a scheduled run's,
//     a queue job's), which names no owner.
//   - Exec / ExecSQL run a statement on a business table that carries its
//     own token column ("… WHERE id = $1 AND token = $2"): no row affected
//     means stale.
//   - Objects: a store that cannot compare tokens (a file system, S3) is
//     written under a key that contains the token (TokenKey), and the row
//     naming the canonical object is committed through the fence; Sweep
//     deletes what no row references and no holder can commit any more.
//
// Bad input is refused before any SQL is sent, with an error wrapping
// aegis.ErrInvalid that names it: a nil transaction, a lease without an
// owner, a token that is not positive (no grant issues one: it is what a
// failed schedule.TokenFrom returns), a resource that is empty, longer than
// MaxResource, not UTF-8 or contains NUL. A missing fence table, or one
// created before the owner column, is an error that says to run Migrate.
//
// # Tables
//
// The package's functions use the default tables (aegis_fence and its
// refusal tables), found on the connection's search_path. A Fence made by
// New from a Config with its own Table has the same functions as methods,
// on that table and the refusal tables named from it: two services on one
// database and schema fence apart with a Fence each.
//
// # Tracing
//
// Check, CheckSQL, CheckLease and CheckLeaseSQL start a span,
// aegis.fence.check, when the context they are given carries one (an
// OpenTelemetry span, such as a traced handler's or a queue job's): a
// child of it, made with that span's TracerProvider, with the resource
// (aegis.fence.resource), the token (aegis.token) and, for a lease, its
// key (aegis.key); never its owner. A refusal is status Error with the
// event aegis.fence.refused, which carries the writer's token and the
// one the table held (aegis.fence.current); another error is recorded on
// the span. A context without a span traces nothing, and the fence has no
// TracerProvider of its own to configure: it takes part in the caller's
// trace or in none. Exec and ExecSQL are traced the same way, as the span
// aegis.fence.exec: its resource is ExecResource of the statement and its
// token the scheduled run's of ctx, if any (the statement's own is an
// argument Exec cannot tell). The object functions make no span (package
// tracing).
//
// # Refusals, recorded by the fence
//
// Every refusal of Check, CheckSQL, CheckLease, CheckLeaseSQL, Exec and
// ExecSQL is recorded by the fence itself, with nothing for the caller to
// call: a row of the refusal log, aegis_fence_refusal_log (the resource,
// the refused and the held token, a lease's key, the writer's node,
// schedule, tick and attempt when a scheduler runs it, the trace, when),
// and one more in the resource's count, aegis_fence_refusal, in one
// transaction of its own. The refused transaction rolls back, so the
// record goes through another connection: for pgx one made from the
// refused transaction's connection's config (a pool's own for Exec on a
// pool); for database/sql a *sql.DB of the same database that the process
// gave the fence (MigrateSQL, RecordRefusalsOn), since a *sql.Tx cannot
// reach its pool. On SQLite a refused *sql.Tx holds the database's write
// lock, so the fence rolls it back before it records (the caller's
// Rollback then returns sql.ErrTxDone). A record takes at most 2s, and at
// most 4 are in flight in the process; one whose reply was lost is read
// back. Exec and ExecSQL, given no resource name, record under
// ExecResource(statement), with the scheduled run's token when their
// context is a handler's.
//
// A record that fails does not change the refusal: the caller gets its
// aegis.ErrStale, a *StaleError whose RecordErr says why the refusal was
// not recorded (and whose text says it too). The log keeps the newest
// LogKept refusals of each resource; RefusalLog and CountRefusalsSince read
// it, Refusals the counts. CountRefusal, which callers called before, is
// no longer needed: a refusal the fence recorded is not counted twice.
//
// What the fence does not do: stop a stale holder's side effects outside the
// fenced store (an e-mail, a call to a service that does not check the
// token). Those need idempotency on the receiving side.
package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/actor"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/migrate"
)

// The fence table, one row per resource with the greatest token accepted
// and, when CheckLease recorded it, a hash of the owner that token came from.
const (
	migrateSQL = `CREATE TABLE IF NOT EXISTS aegis_fence (
	resource text   PRIMARY KEY,
	token    bigint NOT NULL
)`
	// migrateOwnerSQL is version 2. NULL is what a bare Check records (and
	// what every row of version 1 holds): a token that names no owner.
	migrateOwnerSQL = `ALTER TABLE aegis_fence ADD COLUMN owner_hash text`

	// checkSQL records a bare token for resource unless a greater one was
	// accepted, or an equal one from a lease owner: a bare token cannot show
	// it is that owner, so it must not land beside its writes. The row lock
	// orders concurrent writers, and the loser's WHERE is re-evaluated
	// against the winner's row. Works on PostgreSQL and SQLite.
	checkSQL = `INSERT INTO aegis_fence AS f (resource, token, owner_hash) VALUES ($1, $2, NULL)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, owner_hash = NULL
WHERE f.token < excluded.token -- fence: a lower token never lands
   OR (f.token = excluded.token AND f.owner_hash IS NULL) -- the same token again, recorded bare`

	// checkLeaseSQL records token and the owner's hash for resource unless
	// a greater token was accepted, or the same token from another owner
	// (or bare, by Check: NULL = $3 is not true). Same locking as checkSQL.
	checkLeaseSQL = `INSERT INTO aegis_fence AS f (resource, token, owner_hash) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, owner_hash = excluded.owner_hash
WHERE f.token < excluded.token -- fence: a lower token never lands
   OR (f.token = excluded.token AND f.owner_hash = excluded.owner_hash) -- the same holder again`

	// recordedSQL reads what refused a check, to say why; only on the
	// stale path, in the same transaction (the refusing upsert locked the
	// row on PostgreSQL; SQLite's transaction holds the write lock).
	recordedSQL = `SELECT token, owner_hash FROM aegis_fence WHERE resource = $1`
)

// migrations are the fence's schema versions, in order; a released one
// never changes.
var migrations = []migrate.Migration{
	{Version: 1, SQL: migrateSQL},
	{Version: 2, SQL: migrateOwnerSQL},
	{Version: 3, SQL: migrateRefusalSQL},
	{Version: 4, SQL: migrateLogSQL},
	{Version: 5, SQL: migrateLogAtSQL},
	{Version: 6, SQL: migrateLogResourceSQL},
}

// Migrate creates the fence table if it is missing (PostgreSQL), and
// upgrades one created by an earlier version in place: version 2 adds the
// owner_hash column that CheckLease needs, NULL in the rows already there,
// so their tokens keep fencing; version 3 the refusal table, 4 to 6 the
// refusal log and its indexes. It is safe to call from many processes at
// once. Check and CheckLease both need version 2: upgrade the schema before
// the binaries.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error { return std.Migrate(ctx, pool) }

// Migrate is the package function Migrate on f's tables.
func (f *Fence) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return f.apply(ctx, db, migrate.Postgres)
}

// MigrateSQL does the same through database/sql (PostgreSQL or SQLite),
// and then RecordRefusalsOn(db): the refusals of database/sql
// transactions of db's database are recorded through db.
func MigrateSQL(ctx context.Context, db *sql.DB) error { return std.MigrateSQL(ctx, db) }

// MigrateSQL is the package function MigrateSQL on f's tables.
func (f *Fence) MigrateSQL(ctx context.Context, db *sql.DB) error {
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return fmt.Errorf("fence: migrate: %w", err)
	}
	if err := f.apply(ctx, db, d); err != nil {
		return err
	}
	return RecordRefusalsOn(ctx, db)
}

func (f *Fence) apply(ctx context.Context, db *sql.DB, d migrate.Dialect) error {
	if d == migrate.SQLite && strings.Contains(f.t.name, ".") {
		// SQLite names an index with its schema and its table without:
		// the renamed statements, PostgreSQL's way round, do not apply.
		return fmt.Errorf("fence: migrate: %w: Config.Table %q: a schema-qualified table is PostgreSQL's; on SQLite name the table alone", aegis.ErrInvalid, f.t.name)
	}
	ms := slices.Clone(migrations)
	for i := range ms {
		ms[i].SQL = f.t.sql(ms[i].SQL)
	}
	if err := migrate.Apply(ctx, db, d, f.t.component(), ms); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return nil
}

// MaxResource is the longest resource name Check and CheckSQL accept, in
// bytes. The name is a primary key: a bound keeps the index small and turns
// a key built from unbounded input into an error instead of a slow insert.
const MaxResource = 1024

// Check records token for resource inside tx. When a greater token was
// already accepted it writes nothing and returns aegis.ErrStale; the caller
// rolls back. The error is a *StaleError naming the token the table held;
// the fence records the refusal itself, on a connection of its own (see
// the package doc).
//
// Check is for tokens that come without a lease: a scheduled run's token
// (schedule.TokenFrom), a queue job's. The same token lands any number of
// times, from anyone. A lease's token goes through CheckLease, which also
// refuses a second owner of the same token. On one resource the two do not
// mix silently: a bare token equal to one that CheckLease recorded is
// ErrStale (it cannot show it comes from that owner), and a greater bare
// token lands and drops the recorded owner.
//
// The resource must be non-empty UTF-8 of at most MaxResource bytes without
// NUL, and the token positive (every backend's first token is 1, so 0 is a
// token that no grant issued, such as the zero value of a failed
// schedule.TokenFrom): anything else is an error wrapping aegis.ErrInvalid,
// returned before any SQL is sent. When the fence table is missing, or
// predates the owner column, the error says to run Migrate.
func Check(ctx context.Context, tx pgx.Tx, resource string, token aegis.Token) (err error) {
	return std.Check(ctx, tx, resource, token)
}

// Check is the package function Check on f's tables.
func (f *Fence) Check(ctx context.Context, tx pgx.Tx, resource string, token aegis.Token) (err error) {
	ctx, span := startCheck(ctx, resource, token)
	defer endCheck(span, &err)
	if tx == nil {
		return fmt.Errorf("%w: fence: check: tx is nil", aegis.ErrInvalid)
	}
	if err := validate(resource, token); err != nil {
		return err
	}
	err = check(ctx, f.t, pgxTx{tx}, resource, token, "")
	if se, ok := errors.AsType[*StaleError](err); ok {
		recordPgx(ctx, f.t, tx, se, "")
	}
	return err
}

// CheckSQL is Check for a database/sql transaction (PostgreSQL or SQLite),
// with the same validation. Its refusal is recorded through a *sql.DB of
// tx's database given to MigrateSQL or RecordRefusalsOn; on SQLite the
// fence rolls tx back first, and tx.Rollback then returns sql.ErrTxDone.
func CheckSQL(ctx context.Context, tx *sql.Tx, resource string, token aegis.Token) (err error) {
	return std.CheckSQL(ctx, tx, resource, token)
}

// CheckSQL is the package function CheckSQL on f's tables.
func (f *Fence) CheckSQL(ctx context.Context, tx *sql.Tx, resource string, token aegis.Token) (err error) {
	ctx, span := startCheck(ctx, resource, token)
	defer endCheck(span, &err)
	if tx == nil {
		return fmt.Errorf("%w: fence: check: tx is nil", aegis.ErrInvalid)
	}
	if err := validate(resource, token); err != nil {
		return err
	}
	err = check(ctx, f.t, sqlTx{tx}, resource, token, "")
	if se, ok := errors.AsType[*StaleError](err); ok {
		recordSQL(ctx, f.t, tx, se, "")
	}
	return err
}

// validate refuses what Check must never send: a resource that is no
// name (empty, over-long, not UTF-8, with NUL, which PostgreSQL's text
// refuses with a raw protocol error) and a token that no grant issued.
func validate(resource string, token aegis.Token) error {
	if err := validName("resource", resource); err != nil {
		return err
	}
	return validToken(token)
}

func validToken(token aegis.Token) error {
	if token <= 0 {
		return fmt.Errorf("%w: fence: token %d is not positive: no lease grants it (a token read from a context outside a run?)", aegis.ErrInvalid, token)
	}
	return nil
}

// validName checks a resource name or an object key prefix.
func validName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: fence: %s is empty", aegis.ErrInvalid, what)
	case len(name) > MaxResource:
		return fmt.Errorf("%w: fence: %s is %d bytes, more than %d: %.32q…", aegis.ErrInvalid, what, len(name), MaxResource, name)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: fence: %s %.64q is not valid UTF-8", aegis.ErrInvalid, what, name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: fence: %s %.64q contains NUL", aegis.ErrInvalid, what, name)
	}
	return nil
}

// checkErr wraps a failed check, naming the fix when the fence table is
// missing (the first thing a new user meets) or is still at version 1 (the
// first thing an upgrade that skipped Migrate meets).
func checkErr(t tables, resource string, err error) error {
	switch {
	case missingTable(err):
		return fmt.Errorf("fence: check %q: table %s does not exist: %s first: %w", resource, t.table("aegis_fence"), t.migrateHint(), err)
	case missingOwnerColumn(err):
		return fmt.Errorf("fence: check %q: table %s has no owner_hash column (schema version 1): %s to upgrade it: %w", resource, t.table("aegis_fence"), t.migrateHint(), err)
	}
	return fmt.Errorf("fence: check %q: %w", resource, err)
}

// missingTable reports whether err is PostgreSQL's undefined_table (42P01)
// or SQLite's "no such table" (the statements it is asked of name one
// table: the fence table, or a refusal table).
func missingTable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "42P01"
	}
	// modernc.org/sqlite has no code for it but the message.
	return strings.Contains(err.Error(), "no such table: ")
}

// missingOwnerColumn reports whether err is PostgreSQL's undefined_column
// (42703) or SQLite's "has no column named" for owner_hash.
func missingOwnerColumn(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "42703" && strings.Contains(pgErr.Message, "owner_hash")
	}
	return strings.Contains(err.Error(), "has no column named owner_hash")
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
// Exec cannot check that it does. It returns the rows affected. A refusal
// is a *StaleError named ExecResource(sql), with the token of the
// scheduled run ctx belongs to (0 outside one) and Held 0 (not known); the
// fence records it (see the package doc) through db: a pgx.Tx's or
// *pgx.Conn's config, a *pgxpool.Pool itself.
//
// When ctx carries a span, Exec is a span, aegis.fence.exec, a child of it
// (as Check is: see the package tracing), a refusal the event
// aegis.fence.refused.
//
// A nil db or an empty statement is an error wrapping aegis.ErrInvalid.
func Exec(ctx context.Context, db Execer, sql string, args ...any) (int64, error) {
	return std.Exec(ctx, db, sql, args...)
}

// Exec is the package function Exec on f's tables.
func (f *Fence) Exec(ctx context.Context, db Execer, sql string, args ...any) (_ int64, err error) {
	ctx, span := startExec(ctx, sql)
	defer endCheck(span, &err)
	if db == nil {
		return 0, fmt.Errorf("%w: fence: exec: db is nil", aegis.ErrInvalid)
	}
	if strings.TrimSpace(sql) == "" {
		return 0, fmt.Errorf("%w: fence: exec: the statement is empty", aegis.ErrInvalid)
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("fence: exec: %w", err)
	}
	if tag.RowsAffected() == 0 {
		e := execStale(ctx, sql)
		recordPgx(ctx, f.t, db, e, "")
		return 0, e
	}
	return tag.RowsAffected(), nil
}

// SQLExecer is what ExecSQL needs: a *sql.DB, *sql.Conn or *sql.Tx.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecSQL is Exec through database/sql (PostgreSQL or SQLite). A refusal
// is recorded through db when it is a *sql.DB, and as CheckSQL's when it
// is a *sql.Tx (or *sql.Conn). It is traced as Exec is.
func ExecSQL(ctx context.Context, db SQLExecer, query string, args ...any) (int64, error) {
	return std.ExecSQL(ctx, db, query, args...)
}

// ExecSQL is the package function ExecSQL on f's tables.
func (f *Fence) ExecSQL(ctx context.Context, db SQLExecer, query string, args ...any) (_ int64, err error) {
	ctx, span := startExec(ctx, query)
	defer endCheck(span, &err)
	if db == nil {
		return 0, fmt.Errorf("%w: fence: exec: db is nil", aegis.ErrInvalid)
	}
	if strings.TrimSpace(query) == "" {
		return 0, fmt.Errorf("%w: fence: exec: the statement is empty", aegis.ErrInvalid)
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("fence: exec: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("fence: exec: %w", err)
	}
	if n == 0 {
		e := execStale(ctx, query)
		recordSQL(ctx, f.t, db, e, "")
		return 0, e
	}
	return n, nil
}

// execStale is the refusal of Exec's statement: a resource named by the
// statement, which is all Exec knows of what it fences, and the token of
// the scheduled run ctx belongs to, when it does (Exec cannot tell which
// argument is the token).
func execStale(ctx context.Context, statement string) *StaleError {
	e := &StaleError{Resource: ExecResource(statement)}
	if w, ok := actor.From(ctx); ok {
		e.Token = aegis.Token(w.Token)
	}
	e.reason = fmt.Sprintf("the fenced statement affected no row: another holder's token is in it (%s)", e.Resource)
	return e
}

// ExecResource is the resource under which Exec and ExecSQL record a
// refusal (they are given no name): "exec: " and the statement, its
// spaces collapsed, cut to 200 bytes, storable (internal/errtext).
func ExecResource(statement string) string {
	r := "exec: " + errtext.Clean(strings.Join(strings.Fields(statement), " "))
	if len(r) > execResourceLen {
		cut := execResourceLen
		for cut > 0 && !utf8.RuneStart(r[cut]) {
			cut--
		}
		r = r[:cut] + "…"
	}
	return r
}

const execResourceLen = 200
