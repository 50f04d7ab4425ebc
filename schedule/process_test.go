package schedule_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// The tests of this file run each replica as a process of its own: the
// test binary, re-executed into TestProcReplicaMain. Every execution of a
// tick is a row of proc_exec, a table without a unique key, so a tick
// applied twice shows in SQL; every assertion is SQL over the store of
// record (proc_exec and the run table), never a child's output.

// The child's environment.
const (
	procEnvReplica   = "AEGIS_SCHEDULE_PROC_REPLICA" // "1" in a replica process
	procEnvStore     = "AEGIS_SCHEDULE_PROC_STORE"   // "postgres://…" or "sqlite:PATH"
	procEnvNode      = "AEGIS_SCHEDULE_PROC_NODE"
	procEnvNamespace = "AEGIS_SCHEDULE_PROC_NAMESPACE"
	procEnvHandlers  = "AEGIS_SCHEDULE_PROC_HANDLERS" // "exec" or "none"
)

// procHandler is the handler the replicas register (with handlers=exec).
const procHandler = "exec"

const procExecTable = `CREATE TABLE proc_exec (
	ns         text   NOT NULL,
	name       text   NOT NULL,
	fire_ms    bigint NOT NULL,
	node       text   NOT NULL,
	token      bigint NOT NULL,
	started_ms bigint NOT NULL -- the store's clock when the handler ran
)` // no unique key: a tick applied twice is two rows

// The fenced handler's tables: its effect, written through the fence with
// the run's token, and the writes the fence refused.
const (
	procEffectTable = `CREATE TABLE proc_effect (name text NOT NULL, fire_ms bigint NOT NULL, token bigint NOT NULL, node text NOT NULL)`
	procStaleTable  = `CREATE TABLE proc_stale (name text NOT NULL, fire_ms bigint NOT NULL, token bigint NOT NULL, node text NOT NULL)`
	// How a holding run (hold_ms) ended: cause is '' when it held to the
	// end, else why its context ended.
	procEndTable = `CREATE TABLE proc_end (name text NOT NULL, fire_ms bigint NOT NULL, token bigint NOT NULL, ended_ms bigint NOT NULL, cause text NOT NULL)`
	// The ticks a replica dropped past their starting deadline (its
	// EventMisfired): n consecutive ticks from fire_ms. A machine that runs
	// a replica late drops ticks by design; the tests count a tick as lost
	// only when it neither ran nor is here.
	procMissTable  = `CREATE TABLE proc_miss (ns text NOT NULL, name text NOT NULL, fire_ms bigint NOT NULL, n bigint NOT NULL, node text NOT NULL, reason text NOT NULL)`
	procMissInsert = `INSERT INTO proc_miss VALUES ($1, $2, $3, $4, $5, $6)`
)

// procSQL is what differs between the dialects.
type procSQL struct {
	now       string // the store's clock, in ms
	insert    string // $1 name, $2 fire ms, $3 node, $4 token, $5 namespace
	heartbeat string // $1 namespace, $2 node, $3 ms: the replica's heartbeat is that recent
	end       string // $1 name, $2 fire ms, $3 token, $4 cause
}

var (
	procPG = procSQL{
		now: `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`,
		insert: `INSERT INTO proc_exec (name, fire_ms, node, token, ns, started_ms)
VALUES ($1, $2, $3, $4, $5, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)`,
		heartbeat: `SELECT count(*) FROM aegis_schedule_replica
WHERE namespace = $1 AND node = $2 AND seen_at >= timestamptz 'epoch' + $3 * interval '1 millisecond'`,
		end: `INSERT INTO proc_end VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, $4)`,
	}
	procSQLite = procSQL{
		now: `SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)`,
		insert: `INSERT INTO proc_exec (name, fire_ms, node, token, ns, started_ms)
VALUES ($1, $2, $3, $4, $5, CAST(unixepoch('subsec') * 1000 AS INTEGER))`,
		heartbeat: `SELECT count(*) FROM aegis_schedule_replica WHERE namespace = $1 AND node = $2 AND seen_ms >= $3`,
		end:       `INSERT INTO proc_end VALUES ($1, $2, $3, CAST(unixepoch('subsec') * 1000 AS INTEGER), $4)`,
	}
)

// procOpen opens the store a replica or the test uses.
func procOpen(store string) (*sql.DB, procSQL, error) {
	if path, ok := strings.CutPrefix(store, "sqlite:"); ok {
		db, err := sqlitelease.Open(path)
		return db, procSQLite, err
	}
	db, err := sql.Open("pgx", store)
	return db, procPG, err
}

// TestProcReplicaMain is a replica process when procEnvReplica is set (the
// other tests of this file start it), and does nothing otherwise. It runs
// until its stdin closes or it gets SIGTERM, then stops its scheduler and
// exits with 0.
func TestProcReplicaMain(t *testing.T) {
	if os.Getenv(procEnvReplica) != "1" {
		return
	}
	if err := procReplicaRun(); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func procReplicaRun() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// SIGTERM stays caught until the process exits: with NotifyContext, an
	// EOF on stdin first could restore its default action before a SIGTERM
	// sent with it arrives, which would kill the process mid-Stop.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() { <-term; cancel() }()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	node, ns := os.Getenv(procEnvNode), os.Getenv(procEnvNamespace)
	db, q, err := procOpen(os.Getenv(procEnvStore))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := schedule.NewStore(ctx, db, &schedule.StoreConfig{Namespace: ns})
	if err != nil {
		return err
	}
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: ns})
	if err != nil {
		return err
	}
	s, err := schedule.New(&schedule.Config{Node: node, Store: store, Catalog: cat,
		OnEvent: func(e schedule.Event) {
			if e.Kind == schedule.EventError || e.Kind == schedule.EventLost {
				fmt.Fprintf(os.Stderr, "%s: %s %s %s: %s %v\n", node, e.Kind, e.Job, e.Fire.Format(time.RFC3339Nano), e.Reason, e.Err)
			}
			if e.Kind == schedule.EventMisfired {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := db.ExecContext(ctx, procMissInsert, ns, e.Job, e.Fire.UnixMilli(), e.Attempt, node, e.Reason); err != nil {
					fmt.Fprintf(os.Stderr, "%s: record the misfire of %s %s: %v\n", node, e.Job, e.Fire.Format(time.RFC3339Nano), err)
				}
			}
		}})
	if err != nil {
		return err
	}
	if os.Getenv(procEnvHandlers) == procHandler {
		err := s.Handle(procHandler, func(ctx context.Context, args json.RawMessage) error {
			r, _ := schedule.RunFrom(ctx)
			// The row records that the handler was entered: an execution,
			// whatever becomes of the run's context afterwards.
			if _, err := db.ExecContext(context.WithoutCancel(ctx), q.insert, r.Job, r.Fire.UnixMilli(), r.Node, int64(r.Token), r.Namespace); err != nil {
				return err
			}
			var a struct {
				HoldMS int  `json:"hold_ms"` // how long the run lasts
				Fenced bool `json:"fenced"`  // then write the effect through the fence
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return err
			}
			if a.Fenced {
				// It does not look at its context while it works, as a
				// paused process does not: the fence is what stops it.
				time.Sleep(time.Duration(a.HoldMS) * time.Millisecond)
				return procFencedWrite(db, r)
			}
			if a.HoldMS == 0 {
				return nil
			}
			var cause error
			select {
			case <-time.After(time.Duration(a.HoldMS) * time.Millisecond):
			case <-ctx.Done(): // a handler stops when its run's context ends
				cause = context.Cause(ctx)
			}
			text := ""
			if cause != nil {
				text = cause.Error()
			}
			_, err := db.ExecContext(context.WithoutCancel(ctx), q.end, r.Job, r.Fire.UnixMilli(), int64(r.Token), text)
			return errors.Join(cause, err)
		})
		if err != nil {
			return err
		}
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Minute): // the parent stops every replica long before: an orphan must not live on
		s.Stop()
		return errors.New("the test did not stop this replica within 5m")
	}
	s.Stop()
	return nil
}

// procFencedWrite records the run's effect in proc_effect through the
// fence (resource "proc/NAME", the run's token), or, when the fence
// refuses the token, the refusal in proc_stale.
func procFencedWrite(db *sql.DB, r schedule.Run) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	err = fence.CheckSQL(ctx, tx, "proc/"+r.Job, r.Token)
	if errors.Is(err, aegis.ErrStale) {
		_ = tx.Rollback()
		_, serr := db.ExecContext(ctx, `INSERT INTO proc_stale VALUES ($1, $2, $3, $4)`, r.Job, r.Fire.UnixMilli(), int64(r.Token), r.Node)
		return errors.Join(err, serr)
	}
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO proc_effect VALUES ($1, $2, $3, $4)`, r.Job, r.Fire.UnixMilli(), int64(r.Token), r.Node); err != nil {
		return err
	}
	return tx.Commit()
}

// procDB is a test's store, as the test (not a replica) uses it.
type procDB struct {
	t     *testing.T
	store string // what the replicas get
	ns    string
	db    *sql.DB
	q     procSQL
	cat   *schedule.Catalog
	runs  *schedule.Store
	reps  *procReplicas // every replica the test started, in any namespace
}

// procReplicas are a test's replica processes.
type procReplicas struct {
	mu   sync.Mutex
	list []*procReplica
}

// procSetup opens a fresh database ("postgres" or "sqlite") for the test,
// with the catalog, the run table and proc_exec.
func procSetup(t *testing.T, kind, ns string) *procDB {
	store := "sqlite:" + filepath.Join(t.TempDir(), "schedule.db")
	if kind == "postgres" {
		store = testenv.PostgresURL(t)
	}
	db, q, err := procOpen(store)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := t.Context()
	for _, stmt := range []string{procExecTable, procEffectTable, procStaleTable, procEndTable, procMissTable} {
		_, err = db.ExecContext(ctx, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, fence.MigrateSQL(ctx, db))
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: ns})
	require.NoError(t, err)
	runs, err := schedule.NewStore(ctx, db, &schedule.StoreConfig{Namespace: ns})
	require.NoError(t, err)
	d := &procDB{t: t, store: store, ns: ns, db: db, q: q, cat: cat, runs: runs, reps: &procReplicas{}}
	t.Cleanup(d.stopAll)
	return d
}

// namespace is d's store seen from another namespace: the same tables,
// another service.
func (d *procDB) namespace(ns string) *procDB {
	ctx := d.t.Context()
	cat, err := schedule.NewCatalog(ctx, d.db, &schedule.CatalogConfig{Namespace: ns})
	require.NoError(d.t, err)
	runs, err := schedule.NewStore(ctx, d.db, &schedule.StoreConfig{Namespace: ns})
	require.NoError(d.t, err)
	o := *d
	o.ns, o.cat, o.runs = ns, cat, runs
	return &o
}

// now is the store's clock.
func (d *procDB) now() time.Time {
	d.t.Helper()
	var ms int64
	require.NoError(d.t, d.db.QueryRowContext(d.t.Context(), d.q.now).Scan(&ms))
	return time.UnixMilli(ms)
}

// procExec is a row of proc_exec.
type procExec struct {
	node      string
	token     int64
	startedMS int64
}

// execs returns the executions of schedule name (in d's namespace) by
// fire time.
func (d *procDB) execs(name string) map[int64][]procExec {
	d.t.Helper()
	rows, err := d.db.QueryContext(d.t.Context(), `SELECT fire_ms, node, token, started_ms FROM proc_exec WHERE ns = $1 AND name = $2 ORDER BY fire_ms, token`, d.ns, name)
	require.NoError(d.t, err)
	defer rows.Close()
	out := map[int64][]procExec{}
	for rows.Next() {
		var e procExec
		var fire int64
		require.NoError(d.t, rows.Scan(&fire, &e.node, &e.token, &e.startedMS))
		out[fire] = append(out[fire], e)
	}
	require.NoError(d.t, rows.Err())
	return out
}

// firesFrom counts the distinct fire times of name's executions at or
// after from.
func (d *procDB) firesFrom(name string, from time.Time) int {
	n := 0
	for f := range d.execs(name) {
		if f >= from.UnixMilli() {
			n++
		}
	}
	return n
}

// seenUpTo is just after the latest tick of name that executed: every
// tick due before it has been claimed (ticks are claimed at their fire
// time, in order), though its handler's row may still be on its way.
func (d *procDB) seenUpTo(name string) time.Time {
	last := int64(0)
	for f := range d.execs(name) {
		last = max(last, f)
	}
	require.NotZero(d.t, last, "no tick of %s executed", name)
	return time.UnixMilli(last + 1)
}

// dropped returns the ticks of want that a replica of d's namespace
// reported dropped past their starting deadline, with the reports: a
// report of n ticks from fire F covers F and the n-1 ticks of want after
// it.
func (d *procDB) dropped(name string, want []int64) (map[int64]bool, []string) {
	d.t.Helper()
	rows, err := d.db.QueryContext(d.t.Context(), `SELECT fire_ms, n, node, reason FROM proc_miss WHERE ns = $1 AND name = $2 ORDER BY fire_ms`, d.ns, name)
	require.NoError(d.t, err)
	defer rows.Close()
	out, reports := map[int64]bool{}, []string(nil)
	for rows.Next() {
		var fire, n int64
		var node, reason string
		require.NoError(d.t, rows.Scan(&fire, &n, &node, &reason))
		reports = append(reports, fmt.Sprintf("%s dropped %d from %s: %s", node, n, time.UnixMilli(fire).UTC().Format("15:04:05.000"), reason))
		if i := slices.Index(want, fire); i >= 0 {
			for _, f := range want[i:min(len(want), i+int(n))] {
				out[f] = true
			}
		}
	}
	require.NoError(d.t, rows.Err())
	return out, reports
}

// runRecords returns the run table's rows of name by fire time.
func (d *procDB) runRecords(name string) map[int64]schedule.RunRecord {
	d.t.Helper()
	rs, err := d.runs.Runs(d.t.Context(), name, 10_000)
	require.NoError(d.t, err)
	out := map[int64]schedule.RunRecord{}
	for _, r := range rs {
		out[r.Fire.UnixMilli()] = r
	}
	return out
}

// procReplica is a replica process.
type procReplica struct {
	d      *procDB
	node   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{} // closed once the process has exited and been waited for
	err    error         // Wait's, after exited
	killed bool          // by the test
	stderr *testenv.Buffer
}

// start starts a replica called node with the handlers ("exec" or "none")
// and waits until it runs: its heartbeat row is newer than the start. The
// test's cleanup stops it.
func (d *procDB) start(node, handlers string) *procReplica {
	d.t.Helper()
	return d.startAll(handlers, node)[0]
}

// startAll starts replicas with the same handlers at once, and waits until
// each runs.
func (d *procDB) startAll(handlers string, nodes ...string) []*procReplica {
	t := d.t
	t.Helper()
	since := d.now()
	var reps []*procReplica
	for _, node := range nodes {
		reps = append(reps, d.spawn(node, handlers))
	}
	for _, r := range reps {
		procWait(t, 30*time.Second, func() bool {
			select {
			case <-r.exited:
				t.Fatalf("replica %s exited at start: %v\n%s", r.node, r.err, r.stderr.String())
			default:
			}
			var n int
			require.NoError(t, d.db.QueryRowContext(t.Context(), d.q.heartbeat, d.ns, r.node, since.UnixMilli()).Scan(&n))
			return n == 1
		}, "replica %s writes its heartbeat", r.node)
	}
	return reps
}

// spawn starts a replica process; the test's cleanup stops it (stopAll).
func (d *procDB) spawn(node, handlers string) *procReplica {
	t := d.t
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcReplicaMain$", "-test.count=1")
	cmd.Env = append(os.Environ(), procEnvReplica+"=1", procEnvStore+"="+d.store, procEnvNode+"="+node,
		procEnvNamespace+"="+d.ns, procEnvHandlers+"="+handlers)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives a crashed test
	r := &procReplica{d: d, node: node, cmd: cmd, exited: make(chan struct{}), stderr: &testenv.Buffer{}}
	cmd.Stderr = r.stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	r.stdin = stdin
	require.NoError(t, cmd.Start())
	go func() { r.err = cmd.Wait(); close(r.exited) }()
	d.reps.mu.Lock()
	d.reps.list = append(d.reps.list, r)
	d.reps.mu.Unlock()
	return r
}

// stopAll stops the test's replicas, all at once (their Stops overlap),
// and logs what they wrote on stderr.
func (d *procDB) stopAll() {
	d.reps.mu.Lock()
	reps := d.reps.list
	d.reps.mu.Unlock()
	for _, r := range reps {
		_ = r.cmd.Process.Signal(syscall.SIGCONT) // a stopped process handles nothing
		_ = r.stdin.Close()
	}
	for _, r := range reps {
		r.stop(false)
		if s := r.stderr.String(); s != "" {
			d.t.Logf("replica %s (pid %d), stderr:\n%s", r.node, r.cmd.Process.Pid, s)
		}
	}
}

// stop stops the replica with SIGTERM (term) or by closing its stdin, and
// requires a clean exit within 20s (unless the test killed it).
func (r *procReplica) stop(term bool) {
	t := r.d.t
	t.Helper()
	select {
	case <-r.exited:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGCONT) // a stopped process handles nothing
		if term {
			// It may exit meanwhile (os.ErrProcessDone): the exit status
			// below is what counts.
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
		}
		_ = r.stdin.Close()
		select {
		case <-r.exited:
		case <-time.After(20 * time.Second):
			_ = r.cmd.Process.Kill()
			t.Errorf("replica %s did not stop within 20s: SIGKILLed\n%s", r.node, r.stderr.String())
			testenv.Recv(t, r.exited, 10*time.Second, "the SIGKILLed replica "+r.node+" to be reaped")
			return
		}
	}
	if !r.killed {
		require.NoError(t, r.err, "replica %s: exit status\n%s", r.node, r.stderr.String())
	}
}

// procStop stops replicas with SIGTERM, all at once.
func procStop(reps ...*procReplica) {
	for _, r := range reps {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, r := range reps {
		r.stop(true)
	}
}

// kill SIGKILLs the replica and waits for its end.
func (r *procReplica) kill() {
	t := r.d.t
	t.Helper()
	r.killed = true
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGKILL))
	testenv.Recv(t, r.exited, 10*time.Second, "the SIGKILLed replica "+r.node+" to be reaped")
	require.ErrorContains(t, r.err, "killed")
}

// procPhase is a spec in force from an instant: the ticks of a schedule
// around its edits are those of each phase, from its start to the next's.
type procPhase struct {
	sched schedule.Schedule
	from  time.Time
}

// procSchedule is the entry's spec as a Schedule.
func procSchedule(t *testing.T, e schedule.Entry) schedule.Schedule {
	t.Helper()
	if e.Every != 0 {
		return schedule.Every(e.Every)
	}
	s, err := schedule.ParseCron("TZ=" + e.TZ + " " + e.Cron)
	require.NoError(t, err)
	return s
}

// procExpected is the fire times, in ms, of the phases before until.
func procExpected(phases []procPhase, until time.Time) []int64 {
	var out []int64
	for i, p := range phases {
		end := until
		if i+1 < len(phases) && phases[i+1].from.Before(end) {
			end = phases[i+1].from
		}
		for f := p.sched.Next(p.from.Add(-time.Nanosecond)); !f.IsZero() && f.Before(end); f = p.sched.Next(f) {
			out = append(out, f.UnixMilli())
		}
	}
	return out
}

// checkTicks requires that name's executions with a fire time in
// [from, until) are expected ticks, each once, and each the run table's
// run of that tick (node and token); and that every expected tick in
// [from, until) ran, unless a replica reported it dropped past its
// starting deadline (a machine that runs the replicas late drops ticks by
// design: safety is judged always, a tick's run only where the replicas
// kept time). want is the ticks as the replicas walk them, from the
// schedule's own start (its EffectiveAt, or the catalog's Resumed), which
// may be before from: a report of n ticks dropped from F counts n ticks of
// want from F, and F may be before from while the ticks after it are not.
func (d *procDB) checkTicks(name string, want []int64, from, until time.Time) {
	t := d.t
	t.Helper()
	var judged []int64 // the ticks of want in [from, until)
	for _, f := range want {
		if f >= from.UnixMilli() && f < until.UnixMilli() {
			judged = append(judged, f)
		}
	}
	// A tick due before until has been claimed by now; its handler's row
	// may still be on its way. A tick still missing then is reported
	// below, with the others.
	procPoll(10*time.Second, func() bool {
		ex := d.execs(name)
		drop, _ := d.dropped(name, want)
		for _, f := range judged {
			if len(ex[f]) == 0 && !drop[f] {
				return false
			}
		}
		return true
	})
	ex, runs := d.execs(name), d.runRecords(name)
	drop, reports := d.dropped(name, want)
	var got, ran []int64
	for f, es := range ex {
		if f < from.UnixMilli() || f >= until.UnixMilli() {
			continue
		}
		got = append(got, f)
		require.Len(t, es, 1, "tick %s of %s executed %d times: %+v", time.UnixMilli(f).UTC().Format(time.RFC3339Nano), name, len(es), es)
		r := runs[f]
		require.Equal(t, r.Node, es[0].node, "tick %s: the run table's node", time.UnixMilli(f).UTC())
		require.EqualValues(t, r.Token, es[0].token, "tick %s: the run table's token", time.UnixMilli(f).UTC())
	}
	slices.Sort(got)
	var missing []string // what the store says of an expected tick that did not run
	for _, f := range judged {
		if len(ex[f]) > 0 || !drop[f] {
			ran = append(ran, f)
		}
		if len(ex[f]) == 0 && !drop[f] {
			missing = append(missing, d.tickRecord(name, f, runs))
		}
	}
	if len(reports) > 0 {
		t.Logf("ticks of %s the replicas dropped past their starting deadline: %s", name, strings.Join(reports, "; "))
	}
	require.Equal(t, procTimes(ran), procTimes(got), "the executed ticks of %s in [%s, %s) (expected: every tick not reported dropped; reports: %v; the store of the ticks missing: %v)",
		name, from.UTC(), until.UTC(), reports, missing)
}

// tickRecord is what the store has of tick f of name that did not run:
// its run row and its missed tick, if any.
func (d *procDB) tickRecord(name string, f int64, runs map[int64]schedule.RunRecord) string {
	d.t.Helper()
	reader, err := schedule.NewRunReader(d.t.Context(), d.db, &schedule.StoreConfig{Namespace: d.ns})
	require.NoError(d.t, err)
	ms, err := reader.Missed(d.t.Context(), name, 1000)
	require.NoError(d.t, err)
	text := time.UnixMilli(f).UTC().Format("15:04:05.000") + ":"
	if r, ok := runs[f]; ok {
		text += fmt.Sprintf(" run %+v", r)
	}
	for _, m := range ms {
		if m.Fire.UnixMilli() == f {
			text += fmt.Sprintf(" missed (%s by %s: %s)", m.Cause, m.Node, m.Detail)
		}
	}
	return text
}

// checkTicks counts a report of ticks dropped from before the window it
// judges: replicas that bind a resumed schedule late drop its first ticks,
// the first of them between Resume's commit (where the replicas' walk
// starts) and its return (where the check's window starts).
func TestProcCheckTicksDroppedBeforeTheWindow(t *testing.T) {
	t.Parallel()
	d := procSetup(t, "sqlite", "proc-check")
	base := d.now().Truncate(time.Second)
	resumedAt, from, until := base.Add(900*time.Millisecond), base.Add(1050*time.Millisecond), base.Add(3*time.Second)
	// Every replica bound it at base+2.6s: base+1s and base+2s dropped.
	_, err := d.db.ExecContext(t.Context(), procMissInsert, d.ns, "tick", base.Add(time.Second).UnixMilli(), 2, "node-a", "2 ticks dropped by policy fire-once")
	require.NoError(t, err)
	want := procExpected([]procPhase{{schedule.Every(time.Second), resumedAt}}, until)
	require.Equal(t, []int64{base.Add(time.Second).UnixMilli(), base.Add(2 * time.Second).UnixMilli()}, want)
	d.checkTicks("tick", want, from, until)
}

// procWait polls cond every 20ms on the test's goroutine (so cond may use
// require) until it holds; the test fails after d, naming what it waited
// for.
func procWait(t *testing.T, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	if !procPoll(d, cond) {
		t.Fatalf("waited %s for "+msg, append([]any{d}, args...)...)
	}
}

// procPoll polls cond every 20ms until it holds or d has passed, and
// says which.
func procPoll(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// procTimes makes a failure's list of fire times readable.
func procTimes(ms []int64) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, time.UnixMilli(m).UTC().Format("15:04:05.000"))
	}
	return out
}

// checkNothingAfter requires that no run of name started (was claimed) in
// the run table after t0, and that no tick after t0 executed.
func (d *procDB) checkNothingAfter(name string, t0 time.Time, what string) {
	t := d.t
	t.Helper()
	for _, r := range d.runRecords(name) {
		require.False(t, r.Started.After(t0), "a run of %s started at %s, after %s returned (%s): %+v", name, r.Started, what, t0.UTC(), r)
	}
	for f, es := range d.execs(name) {
		require.LessOrEqual(t, f, t0.UnixMilli(), "tick %s of %s executed after %s returned: %+v", time.UnixMilli(f).UTC(), name, what, es)
	}
}

// procBoth runs fn on PostgreSQL and on SQLite at the same time. Not
// through t.Parallel, which runs two tests at once on two cores: the
// scenarios wait on the clock, not the CPU (their replicas idle between
// ticks), and their bounds are generous.
func procBoth(t *testing.T, fn func(t *testing.T, kind string)) {
	var wg sync.WaitGroup
	for _, kind := range []string{"postgres", "sqlite"} {
		wg.Go(func() { t.Run(kind, func(t *testing.T) { fn(t, kind) }) })
	}
	testenv.Wait(t, &wg, 3*time.Minute, "the scenario on both stores") // each subtest's waits are bounded well below
}

// A schedule put while three replica processes run: each of its ticks
// runs on exactly one replica, never before its fire time (how late is
// the starting deadline's business, judged on a fake clock in
// TestMisfire and TestLeaseGrantPastDeadlineIsMisfire).
// Another service on the same database (another namespace, two replicas
// of its own, with the same node names) has a schedule of the same name:
// each service runs its own ticks, once each.
func TestProcPutRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-put")
		other := d.namespace("proc-put-other")
		nodes := []string{"node-a", "node-b", "node-c"}
		d.startAll(procHandler, nodes...)
		other.startAll(procHandler, "node-a", "node-b")
		e, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: procHandler})
		require.NoError(t, err)
		require.Equal(t, nodes, e.Replicas, "the replicas of the schedule's namespace")
		eo, err := other.cat.Put(ctx, schedule.Entry{Name: "tick", Every: 2 * time.Second, Handler: procHandler})
		require.NoError(t, err)
		require.Equal(t, []string{"node-a", "node-b"}, eo.Replicas)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e.EffectiveAt) >= 3 }, "three ticks run")
		until := d.seenUpTo("tick")
		d.checkTicks("tick", procExpected([]procPhase{{schedule.Every(time.Second), e.EffectiveAt}}, until), time.Time{}, until)
		other.checkTicks("tick", procExpected([]procPhase{{schedule.Every(2 * time.Second), eo.EffectiveAt}}, until), time.Time{}, until)
		list, err := d.cat.List(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "@every 1s", list[0].Spec(), "a namespace lists only its own schedules")
		for f, es := range d.execs("tick") {
			require.GreaterOrEqual(t, f, e.EffectiveAt.UnixMilli(), "a tick before the schedule took effect")
			require.Contains(t, nodes, es[0].node)
			// The handler's timestamp (the store's clock, on this host, as
			// it inserts the row) is not before the tick's fire time.
			require.GreaterOrEqual(t, es[0].startedMS, f, "tick %s started early", time.UnixMilli(f).UTC())
		}
	})
}

// Edits of a schedule while three replica processes run: a new interval
// (put twice, the second before the first took effect), then a cron spec
// in a zone; no tick runs twice and none is lost around the instants the
// edits took effect. Pause: no run starts after Pause returned; resume:
// the ticks after it run; delete: nothing runs.
func TestProcEditPauseResumeDelete(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-edit")
		d.startAll(procHandler, "node-a", "node-b", "node-c")
		put := func(e schedule.Entry) schedule.Entry {
			e.Name, e.Handler = "tick", procHandler
			got, err := d.cat.Put(ctx, e)
			require.NoError(t, err)
			return got
		}
		e1 := put(schedule.Entry{Every: time.Second})
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e1.EffectiveAt) >= 2 }, "two ticks of @every 1s")
		// Two edits, the second before the first takes effect: the first's
		// spec (ticks at .5 s, which no other spec has) never fires.
		e2a := put(schedule.Entry{Every: 1500 * time.Millisecond})
		require.Equal(t, "@every 1s", e2a.Previous)
		e2 := put(schedule.Entry{Every: 2 * time.Second})
		require.Equal(t, "@every 1s", e2.Previous, "an edit before the last took effect keeps the spec in force before it")
		require.False(t, e2.EffectiveAt.Before(e2a.EffectiveAt))
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e2.EffectiveAt) >= 1 }, "a tick of @every 2s")
		e3 := put(schedule.Entry{Cron: "* * * * * *", TZ: "Europe/Berlin"})
		require.Equal(t, "@every 2s", e3.Previous)
		require.Equal(t, "* * * * * * (Europe/Berlin)", e3.Spec())
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e3.EffectiveAt) >= 2 }, "two ticks of the cron spec")
		until := d.seenUpTo("tick")
		phases := []procPhase{{procSchedule(t, e1), e1.EffectiveAt}, {procSchedule(t, e2), e2.EffectiveAt}, {procSchedule(t, e3), e3.EffectiveAt}}
		d.checkTicks("tick", procExpected(phases, until), time.Time{}, until)

		_, err := d.cat.Pause(ctx, "tick")
		require.NoError(t, err)
		// +1ms: the run table's times are rounded to the millisecond.
		paused := d.now().Add(time.Millisecond)
		time.Sleep(1500 * time.Millisecond) // not a synchronisation: a tick comes, and must not run
		d.checkNothingAfter("tick", paused, "Pause")

		re, err := d.cat.Resume(ctx, "tick")
		require.NoError(t, err)
		require.False(t, re.Paused)
		// The ticks from Resume's return on run (one between its commit and
		// its return may or may not: it is left out of the check). The
		// replicas walk the ticks from its commit (re.Resumed).
		resumed := d.now()
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", resumed) >= 2 }, "two ticks after Resume")
		until = d.seenUpTo("tick")
		d.checkTicks("tick", procExpected([]procPhase{{procSchedule(t, e3), re.Resumed}}, until), resumed, until)

		require.NoError(t, d.cat.Delete(ctx, "tick"))
		deleted := d.now().Add(time.Millisecond)
		_, err = d.cat.Get(ctx, "tick")
		require.ErrorIs(t, err, schedule.ErrNotFound)
		time.Sleep(1500 * time.Millisecond) // not a synchronisation: a tick comes, and must not run
		d.checkNothingAfter("tick", deleted, "Delete")
		for f, es := range d.execs("tick") {
			require.Len(t, es, 1, "tick %s executed %d times: %+v", time.UnixMilli(f).UTC(), len(es), es)
		}
	})
}

// A replica without the schedule's handler never runs it: the others do,
// Get names it in MissingOn, and once the others stop the schedule's
// ticks do not run at all.
func TestProcReplicaWithoutHandler(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-missing")
		ab := d.startAll(procHandler, "node-a", "node-b")
		a, b := ab[0], ab[1]
		d.start("node-none", "none")
		e, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: procHandler})
		require.NoError(t, err)
		require.Equal(t, []string{"node-a", "node-b"}, e.Replicas)
		require.Equal(t, []string{"node-none"}, e.MissingOn)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e.EffectiveAt) >= 2 }, "two ticks run")
		until := d.seenUpTo("tick")
		d.checkTicks("tick", procExpected([]procPhase{{schedule.Every(time.Second), e.EffectiveAt}}, until), time.Time{}, until)

		procStop(a, b)
		got, err := d.cat.Get(ctx, "tick")
		require.NoError(t, err)
		require.Empty(t, got.Replicas, "the stopped replicas left")
		require.Equal(t, []string{"node-none"}, got.MissingOn)
		stopped := d.now().Add(time.Millisecond)
		time.Sleep(1500 * time.Millisecond) // not a synchronisation: a tick comes that node-none must not run
		d.checkNothingAfter("tick", stopped, "the replicas with the handler stopped")
		for _, r := range d.runRecords("tick") {
			require.NotEqual(t, "node-none", r.Node, "the replica without the handler claimed a tick: %+v", r)
		}
	})
}

// A replica SIGKILLed, its schedule edited, and the replica restarted at
// once (usually before the edit takes effect, 2s after it commits): every
// tick still runs once, and the restarted replica runs the new spec
// (alone, once the others stop).
func TestProcKilledReplicaRestartedMidEdit(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-kill")
		abc := d.startAll(procHandler, "node-a", "node-b", "node-c")
		a, b, c := abc[0], abc[1], abc[2]
		// LockAtMostFor 2s: a run the kill cuts off is the reapers' soon.
		e1, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: procHandler, LockAtMostFor: 2 * time.Second})
		require.NoError(t, err)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e1.EffectiveAt) >= 2 }, "two ticks run")

		b.kill()
		e2, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: 2 * time.Second, Handler: procHandler, LockAtMostFor: 2 * time.Second})
		require.NoError(t, err)
		b = d.start("node-b", procHandler)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e2.EffectiveAt) >= 1 }, "a tick of the new spec runs")

		procStop(a, c)
		alone := d.now()
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", alone) >= 1 }, "the restarted replica runs a tick alone")
		for f, es := range d.execs("tick") {
			if f >= alone.UnixMilli() {
				require.Equal(t, "node-b", es[0].node)
				require.Zero(t, f%2000, "tick %s the restarted replica ran follows the new spec", time.UnixMilli(f).UTC())
			}
		}
		until := d.seenUpTo("tick")
		d.checkKilled("tick", procExpected([]procPhase{{procSchedule(t, e1), e1.EffectiveAt}, {procSchedule(t, e2), e2.EffectiveAt}}, until), until, 2*time.Second)
		b.stop(false)
	})
}

// Edits that change only the args, many per tick, while three replica
// processes run: every edit makes each replica rebind the schedule (a new
// version), and still every tick runs once and none is lost.
func TestProcArgsEditsWhileTicking(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-args")
		d.startAll(procHandler, "node-a", "node-b", "node-c")
		e, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: procHandler, Args: json.RawMessage(`{"n":0}`)})
		require.NoError(t, err)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e.EffectiveAt) >= 1 }, "the first tick runs")
		// The workload (not a synchronisation): an edit aimed at each tick's
		// fire time, from 3ms before to 6ms after, so that the replicas
		// rebind while their claims are in flight.
		for i, ms := range []int{-3, -1, 0, 1, 3, 6} {
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + time.Duration(ms)*time.Millisecond)))
			got, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: procHandler, Args: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i+1))})
			require.NoError(t, err)
			require.Equal(t, e.EffectiveAt, got.EffectiveAt, "an edit of the args keeps the spec's instant")
		}
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", d.now().Add(-time.Second)) >= 1 }, "a tick after the edits")
		until := d.seenUpTo("tick")
		d.checkTicks("tick", procExpected([]procPhase{{schedule.Every(time.Second), e.EffectiveAt}}, until), time.Time{}, until)
	})
}

// A pause and a resume before a pending edit takes effect: the old spec's
// ticks after the resume run up to the edit's instant, the new spec's
// after it (none is lost to the resume).
func TestProcResumeBeforeEditTakesEffect(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-resume")
		d.startAll(procHandler, "node-a", "node-b")
		e1, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: procHandler})
		require.NoError(t, err)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e1.EffectiveAt) >= 1 }, "a tick of @every 1s")
		e2, err := d.cat.Put(ctx, schedule.Entry{Name: "tick", Every: 2 * time.Second, Handler: procHandler})
		require.NoError(t, err)
		pausing := d.now()
		_, err = d.cat.Pause(ctx, "tick")
		require.NoError(t, err)
		re, err := d.cat.Resume(ctx, "tick")
		require.NoError(t, err)
		resumed := d.now()
		// The scenario's precondition, not a speed: EditDelay (2s) leaves a
		// loaded machine room.
		require.True(t, resumed.Before(e2.EffectiveAt), "pause at %s and resume at %s before the edit takes effect at %s", pausing, resumed, e2.EffectiveAt)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("tick", e2.EffectiveAt) >= 1 }, "a tick of @every 2s")
		// A tick between Pause and Resume may or may not have run: the
		// check leaves [pausing, resumed] out.
		until := d.seenUpTo("tick")
		phases := []procPhase{{procSchedule(t, e1), e1.EffectiveAt}, {procSchedule(t, e2), e2.EffectiveAt}}
		d.checkTicks("tick", procExpected(phases, pausing), time.Time{}, pausing)
		after := resumed.Add(time.Millisecond)
		d.checkTicks("tick", procExpected([]procPhase{{procSchedule(t, e1), re.Resumed}, {procSchedule(t, e2), e2.EffectiveAt}}, until), after, until)
	})
}

// A run cut off by a SIGKILL while its schedule is paused is abandoned
// (not left running, nor retried after the resume); the resumed schedule
// runs its next ticks.
func TestProcCrashedRunOfPausedSchedule(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-crash")
		reps := map[string]*procReplica{}
		for _, r := range d.startAll(procHandler, "node-a", "node-b") {
			reps[r.node] = r
		}
		// Each run holds 3s; its row expires 1s after its last heartbeat.
		e, err := d.cat.Put(ctx, schedule.Entry{Name: "crash", Every: 2 * time.Second, Handler: procHandler,
			LockAtMostFor: time.Second, Args: json.RawMessage(`{"hold_ms": 3000}`)})
		require.NoError(t, err)
		var fire int64
		var node string
		procWait(t, 30*time.Second, func() bool {
			for f, es := range d.execs("crash") {
				if f >= e.EffectiveAt.UnixMilli() {
					fire, node = f, es[0].node
					return true
				}
			}
			return false
		}, "a run starts")
		reps[node].kill()
		_, err = d.cat.Pause(ctx, "crash")
		require.NoError(t, err)
		var r schedule.RunRecord
		procWait(t, 30*time.Second, func() bool {
			r = d.runRecords("crash")[fire]
			return r.State != "running"
		}, "the crashed run of the paused schedule to be reaped")
		require.Equal(t, "abandoned", r.State, "the crashed run of a paused schedule: %+v", r)

		resumed, err := d.cat.Resume(ctx, "crash")
		require.NoError(t, err)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("crash", resumed.Updated) >= 1 }, "a tick after Resume")
		require.Len(t, d.execs("crash")[fire], 1, "the crashed tick is not run again")
		require.Equal(t, "abandoned", d.runRecords("crash")[fire].State)
	})
}

// The overlap policy of the row, across processes: with replace, a tick
// that comes while the previous tick's run holds (on whichever replica)
// ends that run — its row says replaced, its context is cancelled at once
// or at its next heartbeat — and runs with a greater token.
func TestProcOverlapReplaceAcrossReplicas(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-replace")
		d.startAll(procHandler, "node-a", "node-b", "node-c")
		// Each run would hold 4s; a tick comes every 2s. A run row's
		// heartbeat comes every 0.5s (a third of LockAtMostFor).
		e, err := d.cat.Put(ctx, schedule.Entry{Name: "long", Every: 2 * time.Second, Handler: procHandler,
			Overlap: schedule.OverlapReplace, LockAtMostFor: 1500 * time.Millisecond, Args: json.RawMessage(`{"hold_ms": 4000}`)})
		require.NoError(t, err)
		require.Equal(t, schedule.OverlapReplace, e.Overlap)
		procWait(t, 30*time.Second, func() bool { return d.firesFrom("long", e.EffectiveAt) >= 3 }, "three ticks start")
		_, err = d.cat.Pause(ctx, "long")
		require.NoError(t, err)

		ex, runs := d.execs("long"), d.runRecords("long")
		// The first tick at or after EffectiveAt, and the next: each was
		// replaced by the tick after it.
		first := schedule.Every(2 * time.Second).Next(e.EffectiveAt.Add(-time.Nanosecond)).UnixMilli()
		for f := first; f < first+4000; f += 2000 {
			require.Len(t, ex[f], 1, "tick %s", time.UnixMilli(f).UTC())
			r := runs[f]
			require.Equal(t, "replaced", r.State, "tick %s, replaced by the next: %+v", time.UnixMilli(f).UTC(), r)
			require.Greater(t, int64(runs[f+2000].Token), int64(r.Token), "the replacing run's token")
			type end struct {
				endedMS int64
				cause   string
			}
			var got end
			procWait(t, 10*time.Second, func() bool {
				err := d.db.QueryRowContext(ctx, `SELECT ended_ms, cause FROM proc_end WHERE name = 'long' AND fire_ms = $1`, f).Scan(&got.endedMS, &got.cause)
				return err == nil
			}, "the replaced run of tick %s to end", time.UnixMilli(f).UTC())
			// Cancelled by the replacing tick: on the same replica at once,
			// elsewhere at its next heartbeat (0.5s), which a loaded machine
			// may run up to a second late. Measured from the replacing run's
			// start, so a late claim of that tick is not counted.
			require.NotEmpty(t, got.cause, "the replaced run held to the end")
			require.Len(t, ex[f+2000], 1, "tick %s", time.UnixMilli(f+2000).UTC())
			after := got.endedMS - ex[f+2000][0].startedMS
			require.Less(t, after, int64(1500), "the replaced run of tick %s ended %dms after the replacing run started: %s", time.UnixMilli(f).UTC(), after, got.cause)
		}
	})
}

// A run in progress when its schedule is edited, paused or deleted ends
// normally (Catalog.Pause and Delete say so; an edit applies to the ticks
// claimed after it): its context is not cancelled, and the run table
// records it succeeded.
func TestProcRunInProgressSurvivesEdits(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-hold")
		d.startAll(procHandler, "node-a", "node-b", "node-c")
		put := func(args string) schedule.Entry {
			e, err := d.cat.Put(ctx, schedule.Entry{Name: "hold", Every: 2 * time.Second, Handler: procHandler, Args: json.RawMessage(args)})
			require.NoError(t, err)
			return e
		}
		// inProgress waits for a run of a tick at or after from that is
		// still running: its handler holds for 1.5s.
		inProgress := func(from time.Time) int64 {
			var fire int64
			procWait(t, 30*time.Second, func() bool {
				runs := d.runRecords("hold")
				for f := range d.execs("hold") {
					if f >= from.UnixMilli() && runs[f].State == "running" {
						fire = f
						return true
					}
				}
				return false
			}, "a run in progress")
			return fire
		}
		ended := func(f int64, what string) {
			var r schedule.RunRecord
			procWait(t, 10*time.Second, func() bool { r = d.runRecords("hold")[f]; return r.State != "running" }, "the run to end")
			require.Equal(t, "succeeded", r.State, "the run in progress when %s: %+v", what, r)
		}

		e := put(`{"hold_ms": 1500}`)
		f := inProgress(e.EffectiveAt)
		put(`{"hold_ms": 1500, "edit": 1}`)
		ended(f, "its args were edited")

		f = inProgress(time.UnixMilli(f + 1))
		_, err := d.cat.Pause(ctx, "hold")
		require.NoError(t, err)
		ended(f, "the schedule was paused")

		re, err := d.cat.Resume(ctx, "hold")
		require.NoError(t, err)
		f = inProgress(re.EffectiveAt)
		require.NoError(t, d.cat.Delete(ctx, "hold"))
		ended(f, "the schedule was deleted")
	})
}

// A replica SIGSTOPped in the middle of a run, past its run row's expiry:
// another replica's reaper retries the tick with a greater token and
// writes its effect; when the stopped replica goes on (SIGCONT), its write
// carries the old token and the fence refuses it. The tick executed twice,
// its effect is applied once: the guarantee is the fence's.
func TestProcPausedReplicaIsFenced(t *testing.T) {
	t.Parallel()
	procBoth(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		d := procSetup(t, kind, "proc-fence")
		reps := map[string]*procReplica{}
		for _, r := range d.startAll(procHandler, "node-a", "node-b", "node-c") {
			reps[r.node] = r
		}
		// One tick, 3 to 4s from now (the edit takes effect 2s after it commits),
		// and none for a day. Its run row expires 1s after its last
		// heartbeat; the run works for 2s, then writes.
		fire := d.now().Add(4 * time.Second).Truncate(time.Second).UTC()
		_, err := d.cat.Put(ctx, schedule.Entry{Name: "once", Cron: fmt.Sprintf("%d %d %d * * *", fire.Second(), fire.Minute(), fire.Hour()),
			Handler: procHandler, Args: json.RawMessage(`{"hold_ms": 2000, "fenced": true}`), LockAtMostFor: time.Second})
		require.NoError(t, err)
		var first procExec
		procWait(t, 30*time.Second, func() bool {
			es := d.execs("once")[fire.UnixMilli()]
			if len(es) > 0 {
				first = es[0]
			}
			return len(es) > 0
		}, "the tick's run starts")
		// Stopped right after the run's first write, some 300ms before its
		// first heartbeat: it holds no lock now (SQLite's write lock, held
		// by a stopped process, would stop the others too).
		stopped := reps[first.node]
		require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGSTOP))

		var retry schedule.RunRecord
		procWait(t, 30*time.Second, func() bool {
			retry = d.runRecords("once")[fire.UnixMilli()]
			return retry.Attempt == 2 && retry.State == "succeeded"
		}, "another replica retries the tick")
		require.NotEqual(t, first.node, retry.Node)
		require.Greater(t, int64(retry.Token), first.token)

		require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGCONT))
		procWait(t, 30*time.Second, func() bool {
			var n int
			require.NoError(t, d.db.QueryRowContext(ctx, `SELECT count(*) FROM proc_stale`).Scan(&n))
			return n > 0
		}, "the resumed replica's write to reach the fence")
		type effect struct {
			fire, token int64
			node        string
		}
		read := func(table string) []effect {
			rows, err := d.db.QueryContext(ctx, `SELECT fire_ms, token, node FROM `+table+` ORDER BY token`)
			require.NoError(t, err)
			defer rows.Close()
			var out []effect
			for rows.Next() {
				var e effect
				require.NoError(t, rows.Scan(&e.fire, &e.token, &e.node))
				out = append(out, e)
			}
			require.NoError(t, rows.Err())
			return out
		}
		require.Equal(t, []effect{{fire.UnixMilli(), int64(retry.Token), retry.Node}}, read("proc_effect"), "the effect, applied once, by the retry")
		require.Equal(t, []effect{{fire.UnixMilli(), first.token, first.node}}, read("proc_stale"), "the stale write the fence refused")
		require.Len(t, d.execs("once")[fire.UnixMilli()], 2, "the tick executed twice: once per attempt")
		r := d.runRecords("once")[fire.UnixMilli()]
		require.Equal(t, retry, r, "the stale run's outcome changed nothing in the run table")
	})
}

// checkKilled is checkTicks for a test that SIGKILLs a replica: the kill
// may fall between a claim and its handler's commit, or between the
// handler's commit and the run's finish. The tick is then the reapers':
// run again with a greater token (attempt 2), or abandoned when a later
// tick had started. So a tick may execute twice only with two tokens and
// a run that is a retry; once with a token older than its run's only when
// the retry was abandoned; and not at all only when its run was abandoned,
// or when it was skipped (overlap forbid) because the cut-off run's row
// was still live, within lockAtMostFor of the cut-off tick.
func (d *procDB) checkKilled(name string, want []int64, until time.Time, lockAtMostFor time.Duration) {
	t := d.t
	t.Helper()
	procPoll(10*time.Second, func() bool {
		ex, runs := d.execs(name), d.runRecords(name)
		drop, _ := d.dropped(name, want)
		for _, f := range want {
			if len(ex[f]) == 0 && runs[f].State != "abandoned" && !drop[f] {
				return false
			}
		}
		return true
	})
	ex, runs := d.execs(name), d.runRecords(name)
	drop, reports := d.dropped(name, want)
	var bad []string
	cutOff := int64(0) // the last tick whose run the kill cut off
	for _, f := range want {
		es, r := ex[f], runs[f]
		ok := false
		switch {
		case len(es) == 0 && drop[f]:
			ok = true // reported dropped past its starting deadline
		case len(es) == 0 && r.State == "skipped":
			// +1s: the row's expiry counts from its claim, after the fire time.
			ok = cutOff != 0 && f-cutOff <= (lockAtMostFor+time.Second).Milliseconds()
		case len(es) == 0:
			ok = r.State == "abandoned"
		case len(es) == 1 && int64(r.Token) == es[0].token:
			ok = true
		case len(es) == 1:
			ok = int64(r.Token) > es[0].token && r.Attempt > 1 && r.State == "abandoned"
		default:
			ok = r.Attempt > 1
			for i := 1; i < len(es); i++ {
				ok = ok && es[i].token > es[i-1].token
			}
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("tick %s: executions %+v, run %+v", time.UnixMilli(f).UTC().Format("15:04:05.000"), es, r))
		} else if len(es) != 1 || int64(r.Token) != es[0].token {
			if r.State != "skipped" {
				cutOff = f
			}
			t.Logf("tick %s: the kill cut off its run: executions %+v, run %+v", time.UnixMilli(f).UTC().Format("15:04:05.000"), es, r)
		}
	}
	for f := range ex {
		if f < until.UnixMilli() && !slices.Contains(want, f) {
			bad = append(bad, fmt.Sprintf("tick %s executed, but no spec in force fires then", time.UnixMilli(f).UTC().Format("15:04:05.000")))
		}
	}
	require.Empty(t, bad, "expected ticks %v; reported dropped: %v", procTimes(want), reports)
}
