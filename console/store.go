package console

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// store reads the tables Aegis keeps in one database, each through the
// package that owns it: the lease table through pglease's or sqlitelease's
// Inspector, the run table through schedule.RunReader, the fence through
// the Fence of Config.FenceTable (its Resources and Refusals), the queue
// through the queue.Inspector of Config.QueueTable.
// It never creates a table: a table that is missing is a part of Aegis the
// database does not use, and its page says so.
type store struct {
	db          *sql.DB
	dialect     migrate.Dialect
	ns          string // the schedule namespace
	leaseTables leaseReader
	runTable    *schedule.RunReader
	queueTables *queue.Inspector // nil on SQLite: the queue is PostgreSQL's
	fences      *fence.Fence     // the fence's tables
}

// leaseReader is what the console reads of a lease table: pglease's and
// sqlitelease's Inspector.
type leaseReader interface {
	Tables(ctx context.Context) (lease, history bool, err error)
	Keys(ctx context.Context, limit int) ([]pglease.Key, error)
	Key(ctx context.Context, key string) (pglease.Key, bool, error)
	Grants(ctx context.Context, key string, limit int) ([]pglease.Grant, error)
}

var (
	_ leaseReader = (*pglease.Inspector)(nil)
	_ leaseReader = (*sqlitelease.Inspector)(nil)
)

// Bounds of what the lease pages read.
const (
	keysShown   = 500
	grantsShown = 1000
)

// newStore opens the owners' readers on db: the default lease and run
// tables, the queue's and the fence's of c (QueueTable, FenceTable).
func newStore(ctx context.Context, db *sql.DB, d migrate.Dialect, c Config) (*store, error) {
	ns := c.Namespace
	st := &store{db: db, dialect: d, ns: ns}
	var err error
	if st.fences, err = fence.New(&fence.Config{Table: c.FenceTable}); err != nil {
		return nil, fmt.Errorf("console: Config.FenceTable: %w", err)
	}
	if d == migrate.SQLite {
		st.leaseTables, err = sqlitelease.NewInspector(db, nil)
	} else {
		if st.queueTables, err = queue.NewInspector(db, &queue.Config{Table: c.QueueTable}); err != nil {
			return nil, fmt.Errorf("console: Config.QueueTable: %w", err)
		}
		st.leaseTables, err = pglease.NewInspector(db, nil)
	}
	if err != nil {
		return nil, err
	}
	if st.runTable, err = schedule.NewRunReader(ctx, db, &schedule.StoreConfig{Namespace: ns}); err != nil {
		return nil, err
	}
	return st, nil
}

// exists reports whether a table is there: the schedule catalog's, which
// schedule.NewCatalog would create.
func (st *store) exists(ctx context.Context, table string) (bool, error) {
	return migrate.Exists(ctx, st.db, st.dialect, table)
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
	Token            aegis.Token
	Granted, Expires time.Time
	Live             bool
	Released         bool          // released (it expires at -infinity), not run out
	Left             time.Duration // until expiry, when live
	Link             string        // the key's page, its path escaped
}

func newLeaseRow(k pglease.Key, now time.Time) leaseRow {
	r := leaseRow{Key: k.Key, Holder: k.Holder, Token: k.Token, Granted: k.Granted, Expires: k.Expires, Released: k.Released}
	r.Live = r.Expires.After(now)
	if r.Live {
		r.Left = r.Expires.Sub(now)
	}
	r.Link = "/leases/" + segment(r.Key)
	return r
}

// leases reads the lease table: every key (at most 500).
func (st *store) leases(ctx context.Context, now time.Time) ([]leaseRow, error) {
	ks, err := st.leaseTables.Keys(ctx, keysShown)
	if err != nil {
		return nil, err
	}
	out := make([]leaseRow, 0, len(ks))
	for _, k := range ks {
		out = append(out, newLeaseRow(k, now))
	}
	return out, nil
}

// fenceRow is a resource of the fence, the greatest token it accepted, and
// its refusals counted (by the fence) when the table is there.
type fenceRow struct {
	Resource string
	Token    aegis.Token // 0: a resource with refusals only (a business table's own check)
	fence.Refusal
}

func (st *store) fence(ctx context.Context, refusalTable bool) ([]fenceRow, error) {
	rs, err := st.fences.Resources(ctx, st.db, 500)
	if err != nil {
		return nil, err
	}
	out := make([]fenceRow, 0, len(rs))
	at := map[string]int{}
	for _, r := range rs {
		at[r.Resource] = len(out)
		out = append(out, fenceRow{Resource: r.Resource, Token: r.Token})
	}
	if !refusalTable {
		return out, nil
	}
	refusals, err := st.fences.Refusals(ctx, st.db, 500)
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
	schedule.RunStatus
	Stuck bool // running past its lease: the reaper's
}

func (st *store) runs(ctx context.Context, now time.Time, job string, limit int) ([]runRow, error) {
	rs, err := st.runTable.Latest(ctx, job, limit)
	if err != nil {
		return nil, err
	}
	out := make([]runRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, runRow{RunStatus: r, Stuck: r.State == "running" && r.Expires.Before(now)})
	}
	return out, nil
}

// stuckScanned bounds the stuck runs the pages read (of every namespace).
const stuckScanned = 1000

// stuck reads the runs of this namespace (of job, or every job when job
// is "") running past their lease, by the store's clock, the latest
// started first: every one among the latest stuckScanned of the run table
// (more: there may be more), not only among its latest rows, which a
// frequent schedule fills.
func (st *store) stuck(ctx context.Context, job string) (out []runRow, more bool, err error) {
	rs, err := st.runTable.Stuck(ctx, 0, stuckScanned)
	if err != nil {
		return nil, false, err
	}
	for _, r := range rs {
		if r.Namespace == st.ns && (job == "" || r.Job == job) {
			out = append(out, runRow{RunStatus: r, Stuck: true})
		}
	}
	return out, len(rs) == stuckScanned, nil
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
