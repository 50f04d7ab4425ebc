package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aegislab/aegis"
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

const (
	insertBalanceSQL = `INSERT INTO aegis_lab_balance (run, value) VALUES ($1, 0)`
	readBalanceSQL   = `SELECT value FROM aegis_lab_balance WHERE run = $1`
	writeBalanceSQL  = `UPDATE aegis_lab_balance SET value = $2 WHERE run = $1`
	tickDoneSQL      = `SELECT count(*) FROM aegis_lab_audit WHERE run = $1 AND tick = $2 AND status = 'EXECUTED'`
	auditSQL         = `INSERT INTO aegis_lab_audit (run, attempt, tick, node, token, status, value, at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	auditRowsSQL = `SELECT attempt, tick, node, token, status, value, at_ms FROM aegis_lab_audit WHERE run = $1 ORDER BY at_ms, attempt`

	// pg-unique: the primary key is the exclusion.
	uniqueClaimSQL = `INSERT INTO aegis_lab_claim (run, tick, node, token, state, until_ms, at_ms)
VALUES ($1, $2, $3, 0, 'RUNNING', 0, $4) ON CONFLICT (run, tick) DO NOTHING`

	// optimistic: a row per tick, claimed by compare-and-set on its version.
	optimisticRowSQL = `INSERT INTO aegis_lab_claim (run, tick, node, token, state, until_ms, at_ms)
VALUES ($1, $2, 0, 0, 'PENDING', 0, $3) ON CONFLICT (run, tick) DO NOTHING`
	optimisticReadSQL  = `SELECT token, state, until_ms FROM aegis_lab_claim WHERE run = $1 AND tick = $2`
	optimisticClaimSQL = `UPDATE aegis_lab_claim
SET token = token + 1, node = $3, state = 'RUNNING', until_ms = $5, at_ms = $6
WHERE run = $1 AND tick = $2 AND token = $4 -- compare-and-set on the version read
  AND state <> 'DONE'`
	// optimisticDoneSQL finishes a claim, fenced: the version must still
	// be the claimer's.
	optimisticDoneSQL = `UPDATE aegis_lab_claim SET state = 'DONE'
WHERE run = $1 AND tick = $2 AND token = $3 -- fence: a stolen claim has a greater version`
	optimisticDoneUnfencedSQL = `UPDATE aegis_lab_claim SET state = 'DONE' WHERE run = $1 AND tick = $2`

	// queue: the tick's once-ever record, inserted in the transaction that
	// enqueues its job; the first node's insert enqueues.
	queueTickSQL = `INSERT INTO aegis_lab_claim (run, tick, node, token, state, until_ms, at_ms)
VALUES ($1, $2, $3, 0, 'QUEUED', 0, $4) ON CONFLICT (run, tick) DO NOTHING`
	// executedTicksSQL counts the run's ticks with an EXECUTED row.
	executedTicksSQL = `SELECT count(DISTINCT tick) FROM aegis_lab_audit WHERE run = $1 AND status = 'EXECUTED'`
)

// migrateStore creates the lab's tables and the fence table.
func migrateStore(ctx context.Context, db *sql.DB) error {
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return fmt.Errorf("lab: store: %w", err)
	}
	if err := migrate.Apply(ctx, db, d, "lab", storeMigrations); err != nil {
		return fmt.Errorf("lab: store: %w", err)
	}
	if err := fence.MigrateSQL(ctx, db); err != nil {
		return fmt.Errorf("lab: store: %w", err)
	}
	return nil
}

// balanceResource is the fence resource of a run's balance.
func balanceResource(run string) string { return "lab/" + run + "/balance" }

// isUniqueViolation reports whether err is a primary key or unique
// violation, on PostgreSQL or SQLite.
func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// isStale reports whether err is the fence's refusal.
func isStale(err error) bool { return errors.Is(err, aegis.ErrStale) }
