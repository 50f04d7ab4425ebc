package console

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/schedule"
)

// store reads the tables Aegis keeps in one database. It never creates a
// table: a table that is missing is a part of Aegis the database does not
// use, and its page says so.
type store struct {
	db      *sql.DB
	dialect migrate.Dialect
	ns      string // the schedule namespace
}

// exists reports whether a table is there.
func (st *store) exists(ctx context.Context, table string) (bool, error) {
	var n int
	var err error
	if st.dialect == migrate.SQLite {
		err = st.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n)
	} else {
		err = st.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1)`, table).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("look for table %s: %w", table, err)
	}
	return n > 0, nil
}

// now is the database's time (PostgreSQL), or this process's (SQLite,
// whose lease times are its processes' clocks).
func (st *store) now(ctx context.Context) (time.Time, error) {
	if st.dialect == migrate.SQLite {
		return time.Now(), nil
	}
	var t time.Time
	if err := st.db.QueryRowContext(ctx, `SELECT now()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database's time: %w", err)
	}
	return t, nil
}

// leaseRow is one key of the lease table. The owner column is the lease's
// secret (who may release or renew): it is never read. Holder is the name
// the granting process gave (pglease/sqlitelease Config.Holder): empty for
// a grant made before holder names, or on a table without the column.
type leaseRow struct {
	Key, Holder      string
	Token            int64
	Granted, Expires time.Time
	Live             bool
	Released         bool          // released (it expires at -infinity), not run out
	Left             time.Duration // until expiry, when live
	Link             string        // the key's page, its path escaped
}

// leases reads the lease table: every key (at most 500), or the one key.
func (st *store) leases(ctx context.Context, now time.Time, key ...string) ([]leaseRow, error) {
	// An older table has no holder column: the page shows none rather
	// than failing.
	holder, err := st.column(ctx, "aegis_lease", "holder")
	if err != nil {
		return nil, err
	}
	h := "''"
	if holder {
		h = "holder"
	}
	where, args := "", []any{}
	if len(key) > 0 {
		where, args = "WHERE key = $1", []any{key[0]}
	}
	// A released key expires at -infinity, which database/sql cannot scan:
	// the epoch stands for it (long expired either way).
	q := `SELECT key, ` + h + `, token, greatest(granted_at, 'epoch'), greatest(expires_at, 'epoch') FROM aegis_lease ` + where + ` ORDER BY key LIMIT 500`
	if st.dialect == migrate.SQLite {
		q = `SELECT key, ` + h + `, token, granted_ms, expires_ms FROM aegis_lease ` + where + ` ORDER BY key LIMIT 500`
	}
	rows, err := st.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read the lease table: %w", err)
	}
	defer rows.Close()
	var out []leaseRow
	for rows.Next() {
		var r leaseRow
		if st.dialect == migrate.SQLite {
			var g, e int64
			if err := rows.Scan(&r.Key, &r.Holder, &r.Token, &g, &e); err != nil {
				return nil, err
			}
			r.Granted, r.Expires = time.UnixMilli(g), time.UnixMilli(e)
		} else if err := rows.Scan(&r.Key, &r.Holder, &r.Token, &r.Granted, &r.Expires); err != nil {
			return nil, err
		}
		r.Released = !r.Expires.After(time.Unix(0, 0))
		r.Live = r.Expires.After(now)
		if r.Live {
			r.Left = r.Expires.Sub(now)
		}
		r.Link = "/leases/" + pathEscape(r.Key)
		out = append(out, r)
	}
	return out, rows.Err()
}

// column reports whether table (which must exist) has a column.
func (st *store) column(ctx context.Context, table, column string) (bool, error) {
	var n int
	var err error
	if st.dialect == migrate.SQLite {
		err = st.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, table, column).Scan(&n)
	} else {
		err = st.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped`, table, column).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("look for column %s.%s: %w", table, column, err)
	}
	return n > 0, nil
}

// grantRow is a grant of a key in the grant history (aegis_lease_grant,
// which a Locker with Config.History writes).
type grantRow struct {
	Token   int64
	Holder  string
	Granted time.Time
}

// grants reads key's recorded grants, the newest first.
func (st *store) grants(ctx context.Context, key string) ([]grantRow, error) {
	q := `SELECT token, holder, granted_at FROM aegis_lease_grant WHERE key = $1 ORDER BY token DESC LIMIT 1000`
	if st.dialect == migrate.SQLite {
		q = `SELECT token, holder, granted_ms FROM aegis_lease_grant WHERE key = $1 ORDER BY token DESC LIMIT 1000`
	}
	rows, err := st.db.QueryContext(ctx, q, key)
	if err != nil {
		return nil, fmt.Errorf("read the grant history: %w", err)
	}
	defer rows.Close()
	var out []grantRow
	for rows.Next() {
		var g grantRow
		if st.dialect == migrate.SQLite {
			var ms int64
			if err := rows.Scan(&g.Token, &g.Holder, &ms); err != nil {
				return nil, err
			}
			g.Granted = time.UnixMilli(ms)
		} else if err := rows.Scan(&g.Token, &g.Holder, &g.Granted); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// fenceRow is a resource of the fence, the greatest token it accepted, and
// the refusals counted (fence.CountRefusal) when the table is there.
type fenceRow struct {
	Resource string
	Token    int64 // 0: a resource with refusals only (a business table's own check)
	fence.Refusal
}

func (st *store) fence(ctx context.Context) ([]fenceRow, error) {
	rows, err := st.db.QueryContext(ctx, `SELECT resource, token FROM aegis_fence ORDER BY resource LIMIT 500`)
	if err != nil {
		return nil, fmt.Errorf("read the fence table: %w", err)
	}
	defer rows.Close()
	var out []fenceRow
	at := map[string]int{}
	for rows.Next() {
		var r fenceRow
		if err := rows.Scan(&r.Resource, &r.Token); err != nil {
			return nil, err
		}
		at[r.Resource] = len(out)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	ok, err := st.exists(ctx, "aegis_fence_refusal")
	if err != nil || !ok {
		return out, err
	}
	refusals, err := fence.Refusals(ctx, st.db, 500)
	if err != nil {
		return nil, err
	}
	for _, r := range refusals {
		if i, ok := at[r.Resource]; ok {
			out[i].Refusal = r
		} else {
			out = append(out, fenceRow{Resource: r.Resource, Refusal: r})
		}
	}
	// The refused first: the resources stale holders came back to.
	slices.SortStableFunc(out, func(a, b fenceRow) int { return cmp.Compare(b.Refusals, a.Refusals) })
	return out, nil
}

// runRow is one run of the schedule's run table (run-key mode).
type runRow struct {
	Job            string
	Fire           time.Time
	Token          int64
	Node           string
	Attempt        int
	State          string
	Started, Ended time.Time
	Expires        time.Time
	Error          string
	Stuck          bool // running past its lease: the reaper's
}

func (st *store) runs(ctx context.Context, now time.Time, job string, limit int) ([]runRow, error) {
	q := `SELECT job, fire_at, token, node, attempt, state, started_at, ended_at, expires_at, coalesce(error, '')
		FROM aegis_schedule_run WHERE namespace = $1 AND ($2 = '' OR job = $2) ORDER BY fire_at DESC, job LIMIT $3`
	if st.dialect == migrate.SQLite {
		q = `SELECT job, fire_ms, token, node, attempt, state, started_ms, ended_ms, expires_ms, coalesce(error, '')
		FROM aegis_schedule_run WHERE namespace = ?1 AND (?2 = '' OR job = ?2) ORDER BY fire_ms DESC, job LIMIT ?3`
	}
	rows, err := st.db.QueryContext(ctx, q, st.ns, job, limit)
	if err != nil {
		return nil, fmt.Errorf("read the run table: %w", err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		if st.dialect == migrate.SQLite {
			var fire, started, expires int64
			var ended sql.NullInt64
			if err := rows.Scan(&r.Job, &fire, &r.Token, &r.Node, &r.Attempt, &r.State, &started, &ended, &expires, &r.Error); err != nil {
				return nil, err
			}
			r.Fire, r.Started, r.Expires = time.UnixMilli(fire), time.UnixMilli(started), time.UnixMilli(expires)
			if ended.Valid {
				r.Ended = time.UnixMilli(ended.Int64)
			}
		} else {
			var ended sql.NullTime
			if err := rows.Scan(&r.Job, &r.Fire, &r.Token, &r.Node, &r.Attempt, &r.State, &r.Started, &ended, &r.Expires, &r.Error); err != nil {
				return nil, err
			}
			r.Ended = ended.Time
		}
		r.Stuck = r.State == "running" && r.Expires.Before(now)
		out = append(out, r)
	}
	return out, rows.Err()
}

// catalog opens the schedule catalog when its table is there.
func (st *store) catalog(ctx context.Context) (*schedule.Catalog, error) {
	ok, err := st.exists(ctx, "aegis_schedule")
	if err != nil || !ok {
		return nil, err
	}
	return schedule.NewCatalog(ctx, st.db, &schedule.CatalogConfig{Namespace: st.ns})
}

// nextFire is an entry's next tick after now (zero when paused or none).
func nextFire(e schedule.Entry, now time.Time) time.Time {
	if e.Paused {
		return time.Time{}
	}
	if e.Every > 0 {
		return schedule.Every(e.Every).Next(now)
	}
	spec := e.Cron
	if e.TZ != "" {
		spec = "TZ=" + e.TZ + " " + spec
	}
	s, err := schedule.ParseCron(spec)
	if err != nil {
		return time.Time{}
	}
	return s.Next(now)
}
