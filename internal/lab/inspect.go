package lab

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// The runbook's queries: what an on-call
// engineer asks the store of record. Each one reads tables that may not
// exist (the lab's, pglease's, the queue's); a missing table is skipped.

// InspectQuery is one runbook question.
type InspectQuery struct {
	Name  string // stuck, expired, tokens, duplicates
	Title string
	// Table is the table the query needs; the query is skipped when it
	// does not exist.
	Table string
	SQL   string
	// Args builds the query's arguments from the options.
	Args func(o InspectOptions) []any
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
		Table: "aegis_schedule_run",
		SQL: `SELECT namespace, job, fire_at, node, token, attempt, started_at, expires_at
FROM aegis_schedule_run
WHERE state = 'running' AND expires_at < now()
  AND started_at < now() - $1 * interval '1 millisecond'
ORDER BY started_at DESC
LIMIT $2`,
		Args: func(o InspectOptions) []any { return []any{o.OlderThan.Milliseconds(), o.Limit} },
	},
	{
		Name: "expired", Title: "expired leases: grants that ran out instead of being released (a holder that crashed or paused past its TTL)",
		Table: "aegis_lease",
		SQL: `SELECT key, token, granted_at, expires_at
FROM aegis_lease WHERE expires_at <= now() AND expires_at > '-infinity'
ORDER BY expires_at DESC LIMIT $1`,
		Args: func(o InspectOptions) []any { return []any{o.Limit} },
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
		return nil, invalid("lab: inspect: db is nil")
	case o.OlderThan < 0:
		return nil, invalid("lab: inspect: OlderThan %s is negative", o.OlderThan)
	case o.Limit < 0:
		return nil, invalid("lab: inspect: Limit %d is negative", o.Limit)
	}
	for _, n := range names {
		if !slices.ContainsFunc(InspectQueries, func(q InspectQuery) bool { return q.Name == n }) {
			return nil, invalid("lab: inspect: unknown query %q", n)
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
		ans := InspectAnswer{Query: q}
		var exists bool
		if err := db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", q.Table).Scan(&exists); err != nil {
			return nil, fmt.Errorf("lab: query %s: %w", q.Name, err)
		}
		if !exists {
			ans.Skipped = "no table " + q.Table + " here"
			out = append(out, ans)
			continue
		}
		rows, err := db.QueryContext(ctx, q.SQL, q.Args(o)...)
		if err != nil {
			return nil, fmt.Errorf("lab: query %s: %w", q.Name, err)
		}
		ans.Columns, _ = rows.Columns()
		for rows.Next() {
			vals := make([]sql.NullString, len(ans.Columns))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return nil, fmt.Errorf("lab: query %s: %w", q.Name, err)
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
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("lab: query %s: %w", q.Name, err)
		}
		out = append(out, ans)
	}
	return out, nil
}
