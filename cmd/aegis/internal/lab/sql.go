package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/migrate"
)

// The store of record: PostgreSQL when the lab has it, else SQLite. Every
// row is keyed by the run's id, so runs share the tables. Times are Unix
// milliseconds of the writer's real clock, the same in both dialects.
var storeMigrations = []migrate.Migration{{Version: 1, SQL: `
CREATE TABLE IF NOT EXISTS aegis_lab_balance (
	run   text   PRIMARY KEY,
	value bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS aegis_lab_audit (
	run     text    NOT NULL,
	attempt text    NOT NULL, -- node.incarnation.sequence: one critical section
	tick    integer NOT NULL,
	node    integer NOT NULL,
	token   bigint  NOT NULL,
	status  text    NOT NULL, -- EXECUTED, or REFUSED by the fence
	value   bigint,           -- the balance written
	at_ms   bigint  NOT NULL,
	PRIMARY KEY (run, attempt)
);
CREATE INDEX IF NOT EXISTS aegis_lab_audit_tick ON aegis_lab_audit (run, tick);
CREATE TABLE IF NOT EXISTS aegis_lab_claim (
	run      text    NOT NULL,
	tick     integer NOT NULL,
	node     integer NOT NULL,
	token    bigint  NOT NULL, -- the claim's version: the tick's fencing token
	state    text    NOT NULL, -- PENDING, RUNNING, DONE
	until_ms bigint  NOT NULL, -- optimistic: claimed until, by the claimer's clock
	at_ms    bigint  NOT NULL, -- claimed at, by the claimer's clock
	PRIMARY KEY (run, tick)
)`}}

// Version 2 is lab v2's workload: a ledger row per job of a run's
// catalog, the audit row's job, holder and run attempt, and the optimistic
// strategy's claim row per job.
var storeMigrationsV2 = migrate.Migration{Version: 2, SQL: `
CREATE TABLE IF NOT EXISTS aegis_lab_ledger (
	run   text   NOT NULL,
	job   text   NOT NULL,
	value bigint NOT NULL,
	PRIMARY KEY (run, job)
);
ALTER TABLE aegis_lab_audit ADD COLUMN job text NOT NULL DEFAULT '';
ALTER TABLE aegis_lab_audit ADD COLUMN owner text NOT NULL DEFAULT ''; -- a short hash of the lease's owner
ALTER TABLE aegis_lab_audit ADD COLUMN run_attempt integer NOT NULL DEFAULT 1; -- 2 and up: a reaper's retry
CREATE INDEX IF NOT EXISTS aegis_lab_audit_job ON aegis_lab_audit (run, job, tick);
CREATE TABLE IF NOT EXISTS aegis_lab_optimistic (
	key      text    PRIMARY KEY, -- the job's lease key
	version  bigint  NOT NULL,    -- the token
	until_ms bigint  NOT NULL,    -- claimed until, by the claimer's clock
	node     integer NOT NULL
);
DROP TABLE IF EXISTS aegis_lab_balance;
DROP TABLE IF EXISTS aegis_lab_claim`}

// Version 3: when each audit row's critical section entered (began its
// read), by the writer's real clock, so that SQL can tell a tick run again
// after it had committed (a re-fire) from two runs at once. Rows written
// before it have 0: never after anything.
var storeMigrationsV3 = migrate.Migration{Version: 3, SQL: `
ALTER TABLE aegis_lab_audit ADD COLUMN entered_ms bigint NOT NULL DEFAULT 0`}

const (
	InsertLedgerSQL = `INSERT INTO aegis_lab_ledger (run, job, value) VALUES ($1, $2, 0)`
	ReadLedgerSQL   = `SELECT value FROM aegis_lab_ledger WHERE run = $1 AND job = $2`
	WriteLedgerSQL  = `UPDATE aegis_lab_ledger SET value = $3 WHERE run = $1 AND job = $2`
	LedgersSQL      = `SELECT job, value FROM aegis_lab_ledger WHERE run = $1`
	AuditSQL        = `INSERT INTO aegis_lab_audit (run, attempt, job, tick, node, token, owner, run_attempt, status, value, at_ms, entered_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	AuditRowsSQL = `SELECT attempt, job, tick, node, token, owner, run_attempt, status, value, at_ms, entered_ms
FROM aegis_lab_audit WHERE run = $1 ORDER BY at_ms, attempt`

	// The store's own account of a run's harm, per job: what the
	// checker's verdict must agree with. A tick applied twice is two
	// EXECUTED rows of one (job, tick); a lost update is an EXECUTED row
	// the ledger does not count.
	StoreDuplicatesSQL = `SELECT job, count(*) FROM (
	SELECT job, tick FROM aegis_lab_audit WHERE run = $1 AND status = 'EXECUTED'
	GROUP BY job, tick HAVING count(*) > 1) d GROUP BY job`
	StoreLostSQL = `SELECT l.job, (SELECT count(*) FROM aegis_lab_audit a
	WHERE a.run = l.run AND a.job = l.job AND a.status = 'EXECUTED') - l.value
FROM aegis_lab_ledger l WHERE l.run = $1`
	// StoreRefiresSQL counts, per job, the re-fires: EXECUTED rows whose
	// critical section entered after another EXECUTED row of its (job,
	// tick) was stamped (at_ms is stamped in the write transaction, just
	// before its commit); and of them the retried ones, which share their
	// run attempt with none of those earlier rows (a reaper's retry and
	// the run it retried, not two runs of one attempt).
	StoreRefiresSQL = `SELECT a.job, count(*), coalesce(sum(CASE WHEN NOT EXISTS (
		SELECT 1 FROM aegis_lab_audit b WHERE b.run = a.run AND b.job = a.job AND b.tick = a.tick
		AND b.status = 'EXECUTED' AND b.attempt <> a.attempt AND b.at_ms < a.entered_ms -- committed before a entered
		AND b.run_attempt = a.run_attempt) THEN 1 ELSE 0 END), 0)
FROM aegis_lab_audit a
WHERE a.run = $1 AND a.status = 'EXECUTED' AND EXISTS (
	SELECT 1 FROM aegis_lab_audit b WHERE b.run = a.run AND b.job = a.job AND b.tick = a.tick
	AND b.status = 'EXECUTED' AND b.attempt <> a.attempt AND b.at_ms < a.entered_ms)
GROUP BY a.job`

	// optimistic: a row per job's lease key, claimed by compare-and-set
	// on its version.
	OptimisticRowSQL   = `INSERT INTO aegis_lab_optimistic (key, version, until_ms, node) VALUES ($1, 0, 0, 0) ON CONFLICT (key) DO NOTHING`
	OptimisticReadSQL  = `SELECT version, until_ms FROM aegis_lab_optimistic WHERE key = $1`
	OptimisticClaimSQL = `UPDATE aegis_lab_optimistic SET version = version + 1, until_ms = $3, node = $4
WHERE key = $1 AND version = $2 -- compare-and-set on the version read`
	OptimisticUntilSQL = `UPDATE aegis_lab_optimistic SET until_ms = $3 WHERE key = $1 AND version = $2`
	// OptimisticCheckSQL is the fence of the optimistic strategy: the
	// claim's version must still be the claimer's (a stolen claim has a
	// greater one). It writes the row so that it takes its lock, as the
	// fence's upsert does.
	OptimisticCheckSQL = `UPDATE aegis_lab_optimistic SET version = version WHERE key = $1 AND version = $2`
	// OptimisticVersionSQL reads the version that refused a check.
	OptimisticVersionSQL = `SELECT version FROM aegis_lab_optimistic WHERE key = $1`
)

// MigrateStore creates the lab's tables and the fence table.
func MigrateStore(ctx context.Context, db *sql.DB) error {
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return fmt.Errorf("lab: store: %w", err)
	}
	if err := migrate.Apply(ctx, db, d, "lab", append(slices.Clone(storeMigrations), storeMigrationsV2, storeMigrationsV3)); err != nil {
		return fmt.Errorf("lab: store: %w", err)
	}
	if err := fence.MigrateSQL(ctx, db); err != nil {
		return fmt.Errorf("lab: store: %w", err)
	}
	return nil
}

// LedgerResource is the fence resource of a job's ledger in a run.
func LedgerResource(run, job string) string { return "lab/" + run + "/" + job }

// IsUniqueViolation reports whether err is a primary key or unique
// violation, on PostgreSQL or SQLite.
func IsUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}
