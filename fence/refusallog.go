package fence

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// The refusal log's reads (PostgreSQL and SQLite).
const (
	refusalLogSQL = `SELECT resource, token, held, lease_key, node, schedule, fire_ms, attempt, trace_id, at_ms FROM aegis_fence_refusal_log
WHERE ($1 = '' OR lease_key = $1) AND ($2 = '' OR resource = $2) AND at_ms >= $3 AND ($5 = '' OR schedule = $5)
ORDER BY at_ms DESC, id DESC LIMIT $4`
	countSinceSQL = `SELECT count(*), EXISTS (SELECT 1 FROM aegis_fence_refusal_log GROUP BY resource HAVING count(*) >= $2 AND min(at_ms) >= $1)
FROM aegis_fence_refusal_log WHERE at_ms >= $1`
)

// RefusalEntry is one refusal of the refusal log: a write the fence
// refused, as the fence recorded it when it refused it.
type RefusalEntry struct {
	Resource string
	Token    aegis.Token // the token refused; 0: not known (fence.Exec outside a scheduled run)
	Held     aegis.Token // the token the fence held; 0: not known
	Key      string      // the refused lease's key (CheckLease, CheckLeaseSQL); "": none
	// Node, Schedule, Fire and Attempt name the writer when a scheduler
	// ran it (a handler's context): its node, its schedule and the tick's
	// fire time and attempt. Empty and zero otherwise; a lease's holder is
	// found from Key and Token in the lease's grant history.
	Node     string
	Schedule string
	Fire     time.Time
	Attempt  int
	TraceID  string    // the trace of the refused write; "": none
	At       time.Time // when, by the refused process's clock
}

// RefusalFilter selects the entries RefusalLog reads; its zero value
// selects all.
type RefusalFilter struct {
	Key      string    // only this lease key's refusals ("": any)
	Resource string    // only this resource's ("": any)
	Schedule string    // only those written in a run of this schedule ("": any)
	Since    time.Time // only those at or after it (zero: any)
}

// RefusalLog reads the refusal log, the newest first, at most limit
// entries (limit ≤ 0 means 100), through database/sql (PostgreSQL or
// SQLite). f may be nil. A nil db is an error wrapping aegis.ErrInvalid; a
// missing table (a schema before version 4: run Migrate) is an error;
// LogTable tells first whether it is there.
func RefusalLog(ctx context.Context, db *sql.DB, f *RefusalFilter, limit int) ([]RefusalEntry, error) {
	return std.RefusalLog(ctx, db, f, limit)
}

// RefusalLog is the package function RefusalLog on fc's tables.
func (fc *Fence) RefusalLog(ctx context.Context, db *sql.DB, f *RefusalFilter, limit int) ([]RefusalEntry, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: fence: refusal log: db is nil", aegis.ErrInvalid)
	}
	if f == nil {
		f = &RefusalFilter{}
	}
	if limit <= 0 {
		limit = 100
	}
	var since int64
	if !f.Since.IsZero() {
		since = f.Since.UnixMilli()
	}
	rows, err := db.QueryContext(ctx, fc.t.sql(refusalLogSQL), f.Key, f.Resource, since, limit, f.Schedule)
	if err != nil {
		return nil, fmt.Errorf("fence: read the refusal log: %w", err)
	}
	defer rows.Close()
	var out []RefusalEntry
	for rows.Next() {
		var e RefusalEntry
		var token, held, fire, attempt, at int64
		if err := rows.Scan(&e.Resource, &token, &held, &e.Key, &e.Node, &e.Schedule, &fire, &attempt, &e.TraceID, &at); err != nil {
			return nil, fmt.Errorf("fence: read the refusal log: %w", err)
		}
		e.Token, e.Held, e.Attempt, e.At = aegis.Token(token), aegis.Token(held), int(attempt), time.UnixMilli(at)
		if fire != 0 {
			e.Fire = time.UnixMilli(fire)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fence: read the refusal log: %w", err)
	}
	return out, nil
}

// CountRefusalsSince counts the refusal log's entries at or after since,
// of every resource. The log keeps the newest LogKept of each resource, so
// the count can be short: more is true when a resource's LogKept entries
// all fall at or after since, and older ones of the window may have been
// pruned (a page then says "n or more"; Refusals counts every refusal of
// a resource, without a window). A nil db is an error wrapping
// aegis.ErrInvalid; a missing table is an error.
func CountRefusalsSince(ctx context.Context, db *sql.DB, since time.Time) (n int64, more bool, err error) {
	return std.CountRefusalsSince(ctx, db, since)
}

// CountRefusalsSince is the package function CountRefusalsSince on f's tables.
func (f *Fence) CountRefusalsSince(ctx context.Context, db *sql.DB, since time.Time) (n int64, more bool, err error) {
	if db == nil {
		return 0, false, fmt.Errorf("%w: fence: count refusals: db is nil", aegis.ErrInvalid)
	}
	if err := db.QueryRowContext(ctx, f.t.sql(countSinceSQL), since.UnixMilli(), LogKept).Scan(&n, &more); err != nil {
		return 0, false, fmt.Errorf("fence: count the refusal log: %w", err)
	}
	return n, more, nil
}

// LogTable tells whether db has the refusal log (Migrate's version 4),
// on PostgreSQL in the connection's search_path, or SQLite. It creates
// nothing. A nil db is an error wrapping aegis.ErrInvalid.
func LogTable(ctx context.Context, db *sql.DB) (bool, error) { return std.LogTable(ctx, db) }

// LogTable is the package function LogTable on f's tables.
func (f *Fence) LogTable(ctx context.Context, db *sql.DB) (bool, error) {
	if db == nil {
		return false, fmt.Errorf("%w: fence: log table: db is nil", aegis.ErrInvalid)
	}
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return false, fmt.Errorf("fence: log table: %w", err)
	}
	ok, err := migrate.Exists(ctx, db, d, f.t.table("aegis_fence_refusal_log"))
	if err != nil {
		return false, fmt.Errorf("fence: %w", err)
	}
	return ok, nil
}
