package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
)

// The refusal table counts, per resource, the writes the fence refused:
// what an operator reads to see that stale holders came back (aegis
// console shows it). The fence keeps it itself, with the refusal log, in
// a write of its own (record.go): a refusal rolls back the transaction it
// happened in. CountRefusal, from before, counts what the fence could not
// record.
const (
	migrateRefusalSQL = `CREATE TABLE IF NOT EXISTS aegis_fence_refusal (
	resource   text   PRIMARY KEY,
	refusals   bigint NOT NULL,
	last_token bigint NOT NULL, -- the token last refused (0: not known, a business table's own check)
	last_held  bigint NOT NULL, -- the token the fence held then (0: not known)
	last_ms    bigint NOT NULL  -- when, Unix milliseconds of the counting process
)`
	countRefusalSQL = `INSERT INTO aegis_fence_refusal AS r (resource, refusals, last_token, last_held, last_ms) VALUES ($1, 1, $2, $3, $4)
ON CONFLICT (resource) DO UPDATE SET refusals = r.refusals + 1, last_token = excluded.last_token, last_held = excluded.last_held, last_ms = excluded.last_ms`
)

// CountRefusal adds one to resource's refusals in the refusal table when
// err is a refusal of the fence (aegis.ErrStale: a *StaleError of Check,
// CheckLease or Exec, or a bare aegis.ErrStale), and reports whether it is
// counted. There is no need to call it any more: the fence records its
// refusals itself. A *StaleError the fence recorded (Recorded) is not
// counted again: CountRefusal writes nothing and reports true. One it
// could not record (RecordErr) is counted here, in the table only. Call
// it after the refused transaction rolled back, on the pool:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { … fence.Check(ctx, tx, res, token) … })
//	if _, cerr := fence.CountRefusal(ctx, pool, res, err); cerr != nil { log… }
//
// resource may be empty when err is a *StaleError (it names its
// resource). Any other error is not counted (false, nil). Migrate creates
// the table (version 3).
func CountRefusal(ctx context.Context, db Execer, resource string, err error) (bool, error) {
	return std.CountRefusal(ctx, db, resource, err)
}

// CountRefusal is the package function CountRefusal on f's tables.
func (f *Fence) CountRefusal(ctx context.Context, db Execer, resource string, err error) (bool, error) {
	if db == nil {
		return false, fmt.Errorf("%w: fence: count refusal: db is nil", aegis.ErrInvalid)
	}
	r, token, held, ok, verr := refusalOf(resource, err)
	if !ok || verr != nil || r == "" {
		return ok, verr
	}
	if _, err := db.Exec(ctx, f.t.sql(countRefusalSQL), r, token, held, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("fence: count the refusal of %q: %w", r, err)
	}
	return true, nil
}

// CountRefusalSQL is CountRefusal through database/sql (PostgreSQL or
// SQLite).
func CountRefusalSQL(ctx context.Context, db SQLExecer, resource string, err error) (bool, error) {
	return std.CountRefusalSQL(ctx, db, resource, err)
}

// CountRefusalSQL is the package function CountRefusalSQL on f's tables.
func (f *Fence) CountRefusalSQL(ctx context.Context, db SQLExecer, resource string, err error) (bool, error) {
	if db == nil {
		return false, fmt.Errorf("%w: fence: count refusal: db is nil", aegis.ErrInvalid)
	}
	r, token, held, ok, verr := refusalOf(resource, err)
	if !ok || verr != nil || r == "" {
		return ok, verr
	}
	if _, err := db.ExecContext(ctx, f.t.sql(countRefusalSQL), r, token, held, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("fence: count the refusal of %q: %w", r, err)
	}
	return true, nil
}

// refusalOf is what CountRefusal counts of err: ok is false when err is
// no refusal, r is "" when the fence recorded it already (counted).
func refusalOf(resource string, err error) (r string, token, held int64, ok bool, verr error) {
	if !errors.Is(err, aegis.ErrStale) {
		return "", 0, 0, false, nil
	}
	r = resource
	if se, isStale := errors.AsType[*StaleError](err); isStale {
		if se.Recorded {
			return "", 0, 0, true, nil
		}
		token, held = int64(se.Token), int64(se.Held)
		if r == "" {
			r = se.Resource
		}
	}
	if r == "" {
		return "", 0, 0, false, fmt.Errorf("%w: fence: count refusal: no resource (the error does not name one)", aegis.ErrInvalid)
	}
	if err := validate(r, 1); err != nil {
		return "", 0, 0, false, err
	}
	return r, token, held, true, nil
}

// Refusal is a resource's row of the refusal table.
type Refusal struct {
	Resource  string
	Refusals  int64
	LastToken aegis.Token // 0: not known
	LastHeld  aegis.Token // 0: not known
	Last      time.Time
}

// Refusals reads the refusal table, most refused first (at most limit
// rows; limit ≤ 0 means 100).
func Refusals(ctx context.Context, db *sql.DB, limit int) ([]Refusal, error) {
	return std.Refusals(ctx, db, limit)
}

// Refusals is the package function Refusals on f's tables.
func (f *Fence) Refusals(ctx context.Context, db *sql.DB, limit int) ([]Refusal, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: fence: refusals: db is nil", aegis.ErrInvalid)
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.QueryContext(ctx, f.t.sql(`SELECT resource, refusals, last_token, last_held, last_ms FROM aegis_fence_refusal ORDER BY refusals DESC, resource LIMIT $1`), limit)
	if err != nil {
		return nil, fmt.Errorf("fence: read the refusal table: %w", err)
	}
	defer rows.Close()
	var out []Refusal
	for rows.Next() {
		var r Refusal
		var token, held, ms int64
		if err := rows.Scan(&r.Resource, &r.Refusals, &token, &held, &ms); err != nil {
			return nil, err
		}
		r.LastToken, r.LastHeld, r.Last = aegis.Token(token), aegis.Token(held), time.UnixMilli(ms)
		out = append(out, r)
	}
	return out, rows.Err()
}
