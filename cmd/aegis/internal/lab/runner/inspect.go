package runner

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/schedule"
)

// The runbook's queries: what an on-call
// engineer asks the store of record. Each one reads tables that may not
// exist (the lab's, pglease's, the schedule's); a missing table is skipped.
// The schedule's run table and pglease's lease table are read through
// their packages (schedule.RunReader, pglease.Inspector), the lab's audit
// with the lab's own SQL.

// InspectQuery is one runbook question.
type InspectQuery struct {
	Name  string // stuck, expired, tokens, duplicates
	Title string
	// Table is the table the query needs; the query is skipped when it
	// does not exist.
	Table string
	// SQL and Args ask a table of the lab's: SQL with the arguments Args
	// builds from the options.
	SQL  string
	Args func(o InspectOptions) []any
	// Read asks a table another package owns, through that package:
	// found is false when the table is missing; the rows are text, in the
	// order of Columns.
	Read    func(ctx context.Context, db *sql.DB, o InspectOptions) (found bool, rows [][]string, err error)
	Columns []string
}

// InspectOptions parameterise the runbook queries.
type InspectOptions struct {
	// OlderThan is how long a claim may stay RUNNING before it is stuck.
	// Default 10 minutes (the seed's threshold).
	OlderThan time.Duration
	// Key is the lease key whose token history to show; for a lab run,
	// aegis-lab/RUN. Default: every lab run's.
	Key string
	// Limit bounds each answer. Default 20.
	Limit int
}

// InspectQueries are the runbook's questions, in the order they are asked.
var InspectQueries = []InspectQuery{
	{
		Name: "stuck", Title: "stuck RUNNING: runs of the schedule's run table past their lease, older than the threshold (a crashed winner: the reaper retries it with a greater token)",
		Table:   "aegis_schedule_run",
		Read:    stuckRuns,
		Columns: []string{"namespace", "job", "fire_at", "node", "token", "attempt", "started_at", "expires_at"},
	},
	{
		Name: "expired", Title: "expired leases: grants that ran out instead of being released (a holder that crashed or paused past its TTL)",
		Table:   "aegis_lease",
		Read:    expiredLeases,
		Columns: []string{"key", "token", "granted_at", "expires_at"},
	},
	{
		Name: "tokens", Title: "token history: every write attempt under a job's lease key, by token (a token that goes back means lost grants)",
		Table: "aegis_lab_audit",
		SQL: `SELECT 'lab-' || lower(run) || '/' || job AS key, token, tick, node, status, value,
  to_timestamp(at_ms / 1000.0) AS at
FROM aegis_lab_audit
WHERE $1 = '' OR 'lab-' || lower(run) || '/' || job = $1
ORDER BY at_ms DESC, token DESC LIMIT $2`,
		Args: func(o InspectOptions) []any { return []any{o.Key, o.Limit} },
	},
	{
		Name: "duplicates", Title: "recent duplicate executions: job ticks whose effect was committed more than once",
		Table: "aegis_lab_audit",
		SQL: `SELECT run, job, tick, count(*) AS executed, string_agg(node::text || ':t' || token::text, ', ' ORDER BY at_ms) AS "node:token"
FROM aegis_lab_audit WHERE status = 'EXECUTED'
GROUP BY run, job, tick HAVING count(*) > 1
ORDER BY max(at_ms) DESC LIMIT $1`,
		Args: func(o InspectOptions) []any { return []any{o.Limit} },
	},
}

// stuckRuns asks schedule.RunReader for the runs still running past their
// lease that started longer than OlderThan ago, in every namespace.
func stuckRuns(ctx context.Context, db *sql.DB, o InspectOptions) (bool, [][]string, error) {
	r, err := schedule.NewRunReader(ctx, db, nil)
	if err != nil {
		return false, nil, err
	}
	if ok, err := r.Exists(ctx); err != nil || !ok {
		return false, nil, err
	}
	runs, err := r.Stuck(ctx, o.OlderThan, o.Limit)
	if err != nil {
		return false, nil, err
	}
	rows := make([][]string, 0, len(runs))
	for _, s := range runs {
		rows = append(rows, []string{s.Namespace, s.Job, text(s.Fire), s.Node, strconv.FormatInt(int64(s.Token), 10),
			strconv.Itoa(s.Attempt), text(s.Started), text(s.Expires)})
	}
	return true, rows, nil
}

// expiredLeases asks pglease's Inspector for the leases that ran out
// instead of being released.
func expiredLeases(ctx context.Context, db *sql.DB, o InspectOptions) (bool, [][]string, error) {
	in, err := pglease.NewInspector(db, nil)
	if err != nil {
		return false, nil, err
	}
	if ok, _, err := in.Tables(ctx); err != nil || !ok {
		return false, nil, err
	}
	keys, err := in.Expired(ctx, o.Limit)
	if err != nil {
		return false, nil, err
	}
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, []string{k.Key, strconv.FormatInt(int64(k.Token), 10), text(k.Granted), text(k.Expires)})
	}
	return true, rows, nil
}

// text prints a time as database/sql prints a timestamp scanned into a
// string (the runbook's SQL answers), so every answer reads alike.
func text(t time.Time) string { return t.Format(time.RFC3339Nano) }

// InspectAnswer is the answer to one query: its column names and rows as
// text. Skipped says why it was not asked (its table is missing).
type InspectAnswer struct {
	Query   InspectQuery
	Columns []string
	Rows    [][]string
	Skipped string
}

// Inspect asks the runbook's queries named in names (all when empty) of
// the PostgreSQL database db.
func Inspect(ctx context.Context, db *sql.DB, names []string, o InspectOptions) ([]InspectAnswer, error) {
	switch {
	case db == nil:
		return nil, badinput.Errorf("lab: inspect: db is nil")
	case o.OlderThan < 0:
		return nil, badinput.Errorf("lab: inspect: OlderThan %s is negative", o.OlderThan)
	case o.Limit < 0:
		return nil, badinput.Errorf("lab: inspect: Limit %d is negative", o.Limit)
	}
	for _, n := range names {
		if !slices.ContainsFunc(InspectQueries, func(q InspectQuery) bool { return q.Name == n }) {
			return nil, badinput.Errorf("lab: inspect: unknown query %q", n)
		}
	}
	if o.OlderThan == 0 {
		o.OlderThan = 10 * time.Minute
	}
	if o.Limit == 0 {
		o.Limit = 20
	}
	var out []InspectAnswer
	for _, q := range InspectQueries {
		if len(names) > 0 && !slices.Contains(names, q.Name) {
			continue
		}
		ans, err := ask(ctx, db, q, o)
		if err != nil {
			return nil, fmt.Errorf("lab: query %s: %w", q.Name, err)
		}
		out = append(out, ans)
	}
	return out, nil
}

// ask answers one query, or says that it skipped it.
func ask(ctx context.Context, db *sql.DB, q InspectQuery, o InspectOptions) (InspectAnswer, error) {
	ans := InspectAnswer{Query: q}
	skipped := "no table " + q.Table + " here"
	if q.Read != nil {
		found, rows, err := q.Read(ctx, db, o)
		if err != nil {
			return ans, err
		}
		if !found {
			ans.Skipped = skipped
			return ans, nil
		}
		ans.Columns, ans.Rows = q.Columns, rows
		return ans, nil
	}
	exists, err := migrate.Exists(ctx, db, migrate.Postgres, q.Table)
	if err != nil {
		return ans, err
	}
	if !exists {
		ans.Skipped = skipped
		return ans, nil
	}
	rows, err := db.QueryContext(ctx, q.SQL, q.Args(o)...)
	if err != nil {
		return ans, err
	}
	defer rows.Close()
	ans.Columns, _ = rows.Columns()
	for rows.Next() {
		vals := make([]sql.NullString, len(ans.Columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return ans, err
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = v.String
			if !v.Valid {
				row[i] = "NULL"
			}
		}
		ans.Rows = append(ans.Rows, row)
	}
	return ans, rows.Err()
}
