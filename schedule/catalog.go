package schedule

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/migrate"
)

// DefaultNamespace is the namespace of a Store, a Catalog or a leader-mode
// scheduler that names none.
const DefaultNamespace = "default"

// MaxArgsLen is the largest Entry.Args, in bytes.
const MaxArgsLen = 64 << 10

// ErrNotFound is returned for a schedule (or a namespace) that the catalog
// does not have.
var ErrNotFound = errors.New("schedule: not found")

var namespacePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

func checkNamespace(field, ns string) error {
	if !namespacePattern.MatchString(ns) {
		return invalid("%s %.70q: want 1 to 63 of a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit", field, ns)
	}
	return nil
}

// CatalogConfig configures a Catalog. The zero value is valid.
type CatalogConfig struct {
	// Namespace is the namespace the Catalog reads and edits. Default
	// DefaultNamespace.
	Namespace string
	// Table is the catalog table, optionally schema-qualified; the
	// namespaces' change counters and the replicas' heartbeats are in
	// Table_namespace and Table_replica. Default "aegis_schedule".
	Table string
	// EditDelay is how long after an edit of a spec commits the new spec
	// takes effect (the instant is written into the row, and every replica
	// uses it). It must exceed the time a change takes to reach every
	// replica (under a second: LISTEN/NOTIFY, or the binder's poll). A
	// replica that has not heard of the change by then fires nothing in
	// its name: the claim checks the row. Default 2s; at most 1h.
	EditDelay time.Duration
}

// Catalog is the schedules of a namespace, in a table of the store of
// record (PostgreSQL or SQLite). Every replica's Scheduler with
// Config.Catalog binds them (see Scheduler.Handle). It is safe for
// concurrent use; edits in a namespace are serialized by its change
// counter's row.
//
// The runbook reads it:
//
//	SELECT namespace, name, spec, tz, handler, enabled, version, effective_at, run_now_at FROM aegis_schedule;
type Catalog struct {
	db        *sql.DB
	dialect   migrate.Dialect
	ns        string
	table     string // quoted
	editDelay time.Duration
	q         catalogSQL
	channel   string  // the NOTIFY channel (PostgreSQL)
	bridge    *sql.DB // db, when NewCatalogFromPool opened it: Close closes it
}

// Validate checks c as NewCatalog does, without a database: a nil error
// means NewCatalog takes c. The error names the field and wraps
// aegis.ErrInvalid.
func (c CatalogConfig) Validate() error {
	_, _, err := c.check()
	return err
}

// check fills c's defaults and checks it; names are its tables, quoted:
// the catalog's, the namespaces', the replicas'.
func (c CatalogConfig) check() (CatalogConfig, []any, error) {
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	c.Table = cmp.Or(c.Table, "aegis_schedule")
	c.EditDelay = cmp.Or(c.EditDelay, 2*time.Second)
	if err := checkNamespace("schedule: CatalogConfig.Namespace", c.Namespace); err != nil {
		return c, nil, err
	}
	switch {
	case c.EditDelay < 0:
		return c, nil, invalid("schedule: CatalogConfig.EditDelay %s is negative", c.EditDelay)
	case c.EditDelay > time.Hour:
		return c, nil, invalid("schedule: CatalogConfig.EditDelay %s is longer than 1h", c.EditDelay)
	case len(c.Table) > 50:
		return c, nil, invalid("schedule: CatalogConfig.Table %q is longer than 50 bytes (its tables append _namespace and _replica)", c.Table)
	}
	names := make([]any, 0, 3)
	for _, suffix := range []string{"", "_namespace", "_replica"} {
		t, err := migrate.Table("schedule: CatalogConfig.Table", c.Table+suffix)
		if err != nil {
			return c, nil, invalid("%w", err)
		}
		names = append(names, t)
	}
	return c, names, nil
}

// NewCatalog returns the catalog on db (SQLite opened like
// sqlitelease.Open, or PostgreSQL through pgx's stdlib driver; a program
// with a pgx pool uses NewCatalogFromPool), applying its numbered
// migrations. A nil cfg means defaults. A nil db is an error wrapping
// aegis.ErrInvalid; so is bad config, naming the field. db stays the
// caller's: the Catalog never closes it.
func NewCatalog(ctx context.Context, db *sql.DB, cfg *CatalogConfig) (*Catalog, error) {
	if db == nil {
		return nil, invalid("schedule: NewCatalog: db is nil")
	}
	var c CatalogConfig
	if cfg != nil {
		c = *cfg
	}
	c, names, err := c.check()
	if err != nil {
		return nil, err
	}
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("schedule: catalog: %w", err)
	}
	q := catalogPostgres
	if d == migrate.SQLite {
		q = catalogSQLite
	}
	ms := migrate.Format(q.migrations, names...)
	if err := migrate.Apply(ctx, db, d, "schedule-catalog:"+c.Table, ms); err != nil {
		return nil, fmt.Errorf("schedule: catalog: %w", err)
	}
	q = q.format(names)
	return &Catalog{db: db, dialect: d, ns: c.Namespace, table: names[0].(string), editDelay: c.EditDelay, q: q,
		channel: "aegis_schedule_" + strings.ReplaceAll(c.Table, ".", "_")}, nil
}

// Namespace is the catalog's namespace.
func (c *Catalog) Namespace() string { return c.ns }

// Put creates the schedule e.Name, enabled, or updates it (a paused
// schedule stays paused). A new spec takes effect EditDelay after the
// edit commits (Entry.EffectiveAt); a change of handler, args or policy
// applies to every tick claimed after the change reached the replicas.
// It returns the row as written. The error names the field that is wrong;
// nothing is written then.
func (c *Catalog) Put(ctx context.Context, e Entry) (Entry, error) {
	if err := checkEntryName(e.Name); err != nil {
		return Entry{}, fmt.Errorf("schedule: put: %w", err)
	}
	v, err := e.validate()
	if err != nil {
		return Entry{}, fmt.Errorf("schedule: put %q: %w", e.Name, err)
	}
	err = c.edit(ctx, func(tx execer, gen, now int64) error {
		var cur row
		err := cur.scan(tx.QueryRowContext(ctx, c.q.get, c.ns, e.Name))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return c.write(ctx, tx, v, cur, err == nil, gen, now)
	})
	if err != nil {
		return Entry{}, fmt.Errorf("schedule: put %q: %w", e.Name, err)
	}
	return c.Get(ctx, e.Name)
}

// write writes the validated entry v, over cur when found, as version gen
// at the store's time now (ms).
func (c *Catalog) write(ctx context.Context, tx execer, v Entry, cur row, found bool, gen, now int64) error {
	spec, tz := v.storedSpec()
	prevSpec, prevTZ, effective := sql.NullString{}, sql.NullString{}, now+c.editDelay.Milliseconds()
	switch {
	case !found: // new: no ticks before it takes effect
	case cur.spec == spec && cur.tz == tz: // the same spec: its instant stays
		prevSpec, prevTZ, effective = cur.prevSpec, cur.prevTZ, cur.effectiveMS
	case now < cur.effectiveMS: // an edit before the last one took effect
		prevSpec, prevTZ = cur.prevSpec, cur.prevTZ
	default:
		prevSpec, prevTZ = sql.NullString{String: cur.spec, Valid: true}, sql.NullString{String: cur.tz, Valid: true}
	}
	_, err := tx.ExecContext(ctx, c.q.put, c.ns, v.Name, spec, tz, prevSpec, prevTZ, effective, v.Handler, string(v.Args),
		v.Misfire.String(), v.Overlap.String(), v.StartingDeadline.Milliseconds(), v.CatchUpMax, v.MaxAttempts,
		v.LockAtMostFor.Milliseconds(), v.LockAtLeastFor.Milliseconds(), gen, now, !v.DisableKeepAlive)
	return err
}

// Pause stops the schedule: no tick is claimed after Pause returns (the
// claiming statement checks the row). A run already going ends normally.
func (c *Catalog) Pause(ctx context.Context, name string) (Entry, error) {
	return c.setEnabled(ctx, "pause", name, false)
}

// Resume restarts a paused schedule from its next tick: the ticks it
// missed while paused are not misfires, they never run (Entry.Resumed). A
// spec edited before the pause, or while paused, takes effect at its
// instant as if there had been no pause.
func (c *Catalog) Resume(ctx context.Context, name string) (Entry, error) {
	return c.setEnabled(ctx, "resume", name, true)
}

func (c *Catalog) setEnabled(ctx context.Context, op, name string, enabled bool) (Entry, error) {
	if err := driver.CheckKey(name); err != nil {
		return Entry{}, fmt.Errorf("schedule: %s: name: %w", op, err)
	}
	err := c.edit(ctx, func(tx execer, gen, now int64) error {
		res, err := tx.ExecContext(ctx, c.q.setEnabled, c.ns, name, enabled, gen, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return c.notFound(ctx, tx, name, gen)
		}
		return nil
	})
	if err != nil {
		return Entry{}, fmt.Errorf("schedule: %s %q: %w", op, name, err)
	}
	return c.Get(ctx, name)
}

// Delete removes the schedule: no tick is claimed after Delete returns; a
// run already going ends normally, and its runs stay in the run table.
func (c *Catalog) Delete(ctx context.Context, name string) error {
	if err := driver.CheckKey(name); err != nil {
		return fmt.Errorf("schedule: delete: name: %w", err)
	}
	err := c.edit(ctx, func(tx execer, gen, now int64) error {
		res, err := tx.ExecContext(ctx, c.q.delete, c.ns, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return c.notFound(ctx, tx, name, gen)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("schedule: delete %q: %w", name, err)
	}
	return nil
}

// notFound is the error of an edit of a schedule the namespace does not
// have: an unknown namespace is named as such. gen is the edit's version
// (1: the edit's transaction created the namespace's counter), or 0
// outside an edit.
func (c *Catalog) notFound(ctx context.Context, tx execer, name string, gen int64) error {
	known := gen > 1
	if gen == 0 {
		if err := tx.QueryRowContext(ctx, c.q.known, c.ns).Scan(&known); err != nil {
			return err
		}
	}
	if !known {
		return fmt.Errorf("%w: %w: namespace %q is unknown (no schedule was ever put in it)", aegis.ErrInvalid, ErrNotFound, c.ns)
	}
	return fmt.Errorf("%w: no schedule %q in namespace %q", ErrNotFound, name, c.ns)
}

// edit runs fn in a transaction that first takes the namespace's next
// version (gen; its row lock serializes the namespace's edits) and the
// store's time in ms, and then tells the binders (NOTIFY on PostgreSQL).
// When the namespace had no row, an fn that fails leaves none.
func (c *Catalog) edit(ctx context.Context, fn func(tx execer, gen, now int64) error) error {
	return inTx(ctx, c.db, c.dialect, func(tx execer) error {
		var gen, now int64
		if err := tx.QueryRowContext(ctx, c.q.bump, c.ns).Scan(&gen, &now); err != nil {
			return err
		}
		if err := fn(tx, gen, now); err != nil {
			return err
		}
		if c.dialect == migrate.Postgres {
			if _, err := tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", c.channel, c.ns); err != nil {
				return err
			}
		}
		return nil
	})
}

// Get returns the schedule called name.
func (c *Catalog) Get(ctx context.Context, name string) (Entry, error) {
	var r row
	err := r.scan(c.db.QueryRowContext(ctx, c.q.get, c.ns, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, fmt.Errorf("schedule: get %q: %w", name, c.notFound(ctx, c.db, name, 0))
	}
	if err != nil {
		return Entry{}, fmt.Errorf("schedule: get %q: %w", name, err)
	}
	e, err := r.entry(c.ns)
	if err != nil {
		return Entry{}, err
	}
	es := []Entry{e}
	if err := c.coverage(ctx, es); err != nil {
		return Entry{}, err
	}
	return es[0], nil
}

// List returns the namespace's schedules, by name. A row this program
// cannot read (a spec or a policy it cannot parse: a hand edit, or a row
// a newer version wrote) does not hide the others: List returns them with
// a *BadRowsError that names each such row and what is wrong with it. Any
// other error (the store's) comes with no entries.
func (c *Catalog) List(ctx context.Context) ([]Entry, error) {
	rows, err := c.rows(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedule: list: %w", err)
	}
	out := make([]Entry, 0, len(rows))
	var bad []RowError
	for _, r := range rows {
		e, err := r.entry(c.ns)
		if err != nil {
			bad = append(bad, RowError{Name: r.name, Err: err})
			continue
		}
		out = append(out, e)
	}
	if err := c.coverage(ctx, out); err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return out, &BadRowsError{Namespace: c.ns, Rows: bad}
	}
	return out, nil
}

// BadRowsError is List's error for the rows of the catalog it could not
// read, beside the entries it could. It wraps none of the rows' errors: a
// bad row is the store's content, never the caller's mistake
// (aegis.ErrInvalid).
type BadRowsError struct {
	Namespace string
	Rows      []RowError // by name
}

// RowError is one catalog row List could not read: its schedule's name
// and what is wrong with it.
type RowError struct {
	Name string
	Err  error
}

func (e *BadRowsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule: list: %d catalog row(s) of namespace %q cannot be read", len(e.Rows), e.Namespace)
	for i, r := range e.Rows {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%v", sep, r.Err)
	}
	return b.String()
}

// rows reads the namespace's rows, by name.
func (c *Catalog) rows(ctx context.Context) ([]row, error) {
	rs, err := c.db.QueryContext(ctx, c.q.list, c.ns)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := r.scan(rs); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// generation is the namespace's change counter (0 before its first edit):
// what the binders poll.
func (c *Catalog) generation(ctx context.Context) (int64, error) {
	var g int64
	err := c.db.QueryRowContext(ctx, c.q.generation, c.ns).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return g, err
}

// replicaTTL is how long a replica's heartbeat counts it as live.
const replicaTTL = 30 * time.Second

// heartbeatEvery is how often a binder writes its replica's heartbeat.
const heartbeatEvery = 10 * time.Second

// coverage fills Replicas and MissingOn from the live replicas'
// heartbeats.
func (c *Catalog) coverage(ctx context.Context, es []Entry) error {
	rs, err := c.db.QueryContext(ctx, c.q.replicas, c.ns, replicaTTL.Milliseconds())
	if err != nil {
		return fmt.Errorf("schedule: the replicas of namespace %q: %w", c.ns, err)
	}
	defer rs.Close()
	type replica struct {
		node     string
		handlers map[string]bool
	}
	var live []replica
	for rs.Next() {
		var node, hs string
		if err := rs.Scan(&node, &hs); err != nil {
			return err
		}
		var names []string
		if err := json.Unmarshal([]byte(hs), &names); err != nil {
			return fmt.Errorf("schedule: replica %q's handlers: %w", node, err)
		}
		r := replica{node: node, handlers: make(map[string]bool, len(names))}
		for _, n := range names {
			r.handlers[n] = true
		}
		live = append(live, r)
	}
	if err := rs.Err(); err != nil {
		return err
	}
	for i := range es {
		for _, r := range live {
			if r.handlers[es[i].Handler] {
				es[i].Replicas = append(es[i].Replicas, r.node)
			} else {
				es[i].MissingOn = append(es[i].MissingOn, r.node)
			}
		}
	}
	return nil
}

// heartbeat records that node is live in the namespace with handlers.
func (c *Catalog) heartbeat(ctx context.Context, node string, handlers []string) error {
	hs, _ := json.Marshal(handlers)
	_, err := c.db.ExecContext(ctx, c.q.heartbeat, c.ns, node, string(hs))
	return err
}

// leave removes node's heartbeat.
func (c *Catalog) leave(ctx context.Context, node string) error {
	_, err := c.db.ExecContext(ctx, c.q.leave, c.ns, node)
	return err
}

// inTx runs fn in a transaction on one connection (BEGIN IMMEDIATE on
// SQLite, which takes the write lock before reading).
func inTx(ctx context.Context, db *sql.DB, d migrate.Dialect, fn func(execer) error) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	begin := "BEGIN"
	if d == migrate.SQLite {
		begin = "BEGIN IMMEDIATE"
	}
	defer func() {
		if err != nil {
			migrate.Rollback(ctx, conn)
		}
	}()
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		return err
	}
	if err := fn(conn); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}
