package schedule_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// BenchmarkCatalogThousand is the catalog at scale: N catalog schedules
// "@every 1s" (N = 1, the floor; 100; 1,000) bound by three replicas in
// run-key mode, on PostgreSQL ($AEGIS_POSTGRES_URL, a schema of its own)
// and on SQLite (a file in a temporary directory). Run it with
//
//	eval "$(scripts/services env)"
//	go test -run '^$' -bench CatalogThousand -benchtime 10x ./schedule
//
// Each b.Loop iteration is one second of wall time holding one tick of
// every schedule, so -benchtime 10x measures a window of 10 ticks (the
// default -benchtime 1s measures one). Plain `go test ./schedule` runs no
// benchmark. Intervals are aligned to the Unix epoch, so the N schedules
// fire at the same instant: each tick is a burst of 3·N claims, the worst
// case.
//
// The schedules are put while the replicas run, as a live catalog is
// edited; the window starts once every replica has bound them and they
// have fired for a few seconds. It reports, over the window's ticks:
//
//   - p50-ms, p99-ms: claim latency from the fire time as the store
//     recorded it: the run row's started_at (the claim statement's clock,
//     which is this machine's: the servers run on it) minus its fire_at;
//   - handler-p50-ms, handler-p99-ms: the same to the moment the handler
//     started (this process's clock);
//   - cpu-ms/tick/replica: this process's CPU (user+sys, getrusage) per
//     schedule tick and replica; cpu-ms/s/replica: the same per second;
//   - db-cpu-ms/tick (PostgreSQL on this machine): the CPU of the
//     replicas' server backends (found by application_name, read from
//     /proc) per tick;
//   - busy-%: the whole machine's CPU in use (other processes included:
//     read the figures with it);
//   - B/schedule/replica: heap and stacks in use after GC with the
//     schedules bound and firing, minus before the first Put, per schedule
//     and replica (at N = 1 it is noise, even negative: the pools' first
//     connections and the runtime's own);
//   - bind-s: from the last Put's return to every replica having bound
//     every schedule; runs/s;
//   - missed: ticks no replica claimed, skipped: ticks claimed as
//     skipped (overlap forbid, the default, found the job's previous run
//     still recorded as running), stranded: ticks claimed whose handler
//     never ran. Counted, not failed: an overloaded store misses a tick
//     past its starting deadline (the misfire policy drops it), and a
//     claim whose commit landed after its timeout leaves the row to the
//     reapers, which retry it after LockAtMostFor.
//
// A tick that runs twice fails the benchmark: that is the catalog's
// guarantee, not a timing.
//
// The three replicas are three Schedulers in this process, each with its
// own pool (pgxpool's default size) or *sql.DB, Store and Catalog: what
// three processes would open, but in one Go runtime, so their CPU is
// measured together and divided by three.
func BenchmarkCatalogThousand(b *testing.B) {
	for _, dbName := range []string{"postgres", "sqlite"} {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("%s/schedules=%d", dbName, n), func(b *testing.B) { benchCatalog(b, dbName, n) })
		}
	}
}

const benchReplicas = 3

// benchRun is one run of a schedule, as its handler saw it.
type benchRun struct {
	job     string
	fire    time.Time
	node    string
	token   aegis.Token
	started time.Time
}

// benchLog records the runs of the window's ticks.
type benchLog struct {
	from atomic.Int64 // fire time (Unix ms) of the window's first tick; 0: record nothing
	mu   sync.Mutex
	runs []benchRun
}

func (l *benchLog) handler(node string) schedule.Handler {
	return func(ctx context.Context, _ json.RawMessage) error {
		now := time.Now()
		r, _ := schedule.RunFrom(ctx)
		if from := l.from.Load(); from == 0 || r.Fire.UnixMilli() < from {
			return nil
		}
		l.mu.Lock()
		l.runs = append(l.runs, benchRun{job: r.Job, fire: r.Fire, node: node, token: r.Token, started: now})
		l.mu.Unlock()
		return nil
	}
}

// countBefore counts the recorded runs of ticks before end.
func (l *benchLog) countBefore(end time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.runs {
		if r.fire.Before(end) {
			n++
		}
	}
	return n
}

func (l *benchLog) snapshot() []benchRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// benchEvents counts one replica's events and the schedules it bound.
type benchEvents struct {
	kinds sync.Map // schedule.EventKind → *atomic.Int64
	mu    sync.Mutex
	bound map[string]bool
	errs  []string // the first few distinct errors
}

func (e *benchEvents) on(ev schedule.Event) {
	c, _ := e.kinds.LoadOrStore(ev.Kind, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	switch {
	case ev.Kind == schedule.EventBound && strings.HasPrefix(ev.Reason, "bound "):
		e.mu.Lock()
		e.bound[ev.Job] = true
		e.mu.Unlock()
	case ev.Kind == schedule.EventError && ev.Err != nil:
		e.mu.Lock()
		if msg := strings.TrimPrefix(ev.Reason+": ", ": ") + ev.Err.Error(); len(e.errs) < 3 && !slices.Contains(e.errs, msg) {
			e.errs = append(e.errs, msg)
		}
		e.mu.Unlock()
	}
}

func (e *benchEvents) kind(k schedule.EventKind) int64 {
	c, ok := e.kinds.Load(k)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

func (e *benchEvents) errorSample() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

func (e *benchEvents) boundCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.bound)
}

// benchReplica is one replica's connections.
type benchReplica struct {
	db    *sql.DB
	store *schedule.Store
	cat   *schedule.Catalog
}

func benchCatalog(b *testing.B, dbName string, n int) {
	ctx := context.Background()
	ns := "bench-" + benchHex(4) // NOTIFY channels are per database: other tests' edits must not wake these binders
	var (
		open    func(i int) *benchReplica
		appName string
	)
	switch dbName {
	case "postgres":
		u, err := url.Parse(testenv.PostgresURL(b))
		require.NoError(b, err)
		appName = "aegis-" + ns
		open = func(i int) *benchReplica {
			q := u.Query()
			q.Set("application_name", fmt.Sprintf("%s-%d", appName, i))
			uu := *u
			uu.RawQuery = q.Encode()
			pool, err := pgxpool.New(ctx, uu.String())
			require.NoError(b, err)
			db := stdlib.OpenDBFromPool(pool)
			b.Cleanup(func() { db.Close(); pool.Close() })
			return benchOpen(b, db, ns)
		}
	default:
		path := filepath.Join(b.TempDir(), "schedule.db")
		open = func(int) *benchReplica {
			db, err := sqlitelease.Open(path)
			require.NoError(b, err)
			b.Cleanup(func() { db.Close() })
			return benchOpen(b, db, ns)
		}
	}

	log := &benchLog{}
	events := make([]*benchEvents, benchReplicas)
	var admin *benchReplica
	for i := range benchReplicas {
		r := open(i)
		admin = r
		ev := &benchEvents{bound: map[string]bool{}}
		events[i] = ev
		node := fmt.Sprintf("bench-%d", i)
		s, err := schedule.New(&schedule.Config{Node: node, Store: r.store, Catalog: r.cat, OnEvent: ev.on})
		require.NoError(b, err)
		require.NoError(b, s.Handle("bench", log.handler(node)))
		require.NoError(b, s.Start(ctx))
		b.Cleanup(func() { stop(b, s) })
	}
	memBefore := benchMem()

	var effective time.Time
	for i := range n {
		e, err := admin.cat.Put(ctx, schedule.Entry{Name: fmt.Sprintf("s%04d", i), Every: time.Second, Handler: "bench"})
		require.NoError(b, err)
		effective = e.EffectiveAt
	}
	lastPut := time.Now()
	waitFor(b, 2*time.Minute, func() bool {
		for _, ev := range events {
			if ev.boundCount() < n {
				return false
			}
		}
		return true
	}, "every replica binds the %d schedules", n)
	bindTime := time.Since(lastPut)

	// Warm up (pools grown, every loop past its first tick), then weigh the
	// heap with the schedules bound and firing.
	time.Sleep(time.Until(effective.Add(3 * time.Second))) // a wall-clock instant: the window is wall time
	memBound := benchMem()

	t0 := time.Now().Truncate(time.Second).Add(2 * time.Second) // the window's first tick
	w0 := t0.Add(-500 * time.Millisecond)                       // the window: half a second around each tick
	log.from.Store(t0.UnixMilli())
	time.Sleep(time.Until(w0))
	ev0 := benchEventTotals(events)
	cpu0, busy0, db0 := benchCPU(), benchBusy(), benchDBCPU(ctx, b, admin.db, appName)

	ticks := 0
	for b.Loop() {
		time.Sleep(time.Until(w0.Add(time.Duration(ticks+1) * time.Second)))
		ticks++
	}
	cpu1, busy1, db1 := benchCPU(), benchBusy(), benchDBCPU(ctx, b, admin.db, appName)
	ev1 := benchEventTotals(events)
	window := time.Duration(ticks) * time.Second
	end := t0.Add(window) // the first tick after the window

	// Let the window's last ticks run: a tick is claimed within its
	// starting deadline (half a second here) or dropped, and a claim in
	// flight ends within 5s.
	want := n * ticks
	drain := time.NewTimer(15 * time.Second)
	defer drain.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for done := false; !done && log.countBefore(end) < want; {
		select {
		case <-drain.C:
			done = true // the rest did not run: counted as missed below
		case <-poll.C:
		}
	}

	runs := log.snapshot()
	perTick := map[string]int{}
	var handlerLat []time.Duration
	for _, r := range runs {
		if !r.fire.Before(end) {
			continue
		}
		k := r.job + "@" + r.fire.UTC().Format(time.RFC3339Nano)
		perTick[k]++
		if perTick[k] > 1 {
			b.Fatalf("tick %s ran twice (the second on %s, token %d)", k, r.node, r.token)
		}
		handlerLat = append(handlerLat, r.started.Sub(r.fire))
	}
	rows := benchRows(ctx, b, admin.db, dbName, ns, t0, end)
	storeLat := make([]time.Duration, 0, len(rows))
	skipped, stranded, retried := 0, 0, 0
	for _, r := range rows {
		storeLat = append(storeLat, r.latency) // every claim that landed, skipped ones too
		switch {
		case r.state == "skipped":
			skipped++
		case perTick[r.job+"@"+time.UnixMilli(r.fireMS).UTC().Format(time.RFC3339Nano)] == 0:
			stranded++
		}
		if r.attempt > 1 {
			retried++
		}
	}
	missed := want - len(rows)
	if len(perTick) < want || retried > 0 {
		// Not failures (see the doc comment): an overloaded store drops
		// ticks past their starting deadline, skips the ticks of a job whose
		// previous run is not recorded as ended yet (overlap forbid), and a
		// claim whose commit landed after it timed out leaves its row to the
		// reapers, which retry it after LockAtMostFor.
		b.Logf("%d of %d ticks did not run: %d never claimed (misfired %d, errors %d, not primary %d, refused %d), %d skipped, %d stranded; %d retried",
			want-len(perTick), want, missed, ev1[schedule.EventMisfired]-ev0[schedule.EventMisfired], ev1[schedule.EventError]-ev0[schedule.EventError],
			ev1[schedule.EventNotPrimary]-ev0[schedule.EventNotPrimary], ev1[schedule.EventRefused]-ev0[schedule.EventRefused], skipped, stranded, retried)
		for i, e := range events {
			for _, m := range e.errorSample() {
				b.Logf("bench-%d: %s", i, m)
			}
		}
	}

	b.ReportMetric(0, "ns/op") // an op is one second of wall time by construction
	b.ReportMetric(benchPct(storeLat, 50), "p50-ms")
	b.ReportMetric(benchPct(storeLat, 99), "p99-ms")
	b.ReportMetric(benchPct(handlerLat, 50), "handler-p50-ms")
	b.ReportMetric(benchPct(handlerLat, 99), "handler-p99-ms")
	cpu := float64((cpu1 - cpu0).Microseconds()) / 1000
	b.ReportMetric(cpu/float64(want)/benchReplicas, "cpu-ms/tick/replica")
	b.ReportMetric(cpu/window.Seconds()/benchReplicas, "cpu-ms/s/replica")
	if db0 != nil && db1 != nil {
		var dbCPU time.Duration
		for pid, c := range db1 {
			dbCPU += c - db0[pid] // a backend that connected during the window counts from zero
		}
		b.ReportMetric(float64(dbCPU.Microseconds())/1000/float64(want), "db-cpu-ms/tick")
	}
	b.ReportMetric(busy1.percentSince(busy0), "busy-%")
	b.ReportMetric(float64(int64(memBound)-int64(memBefore))/float64(n)/benchReplicas, "B/schedule/replica")
	b.ReportMetric(float64(len(perTick))/window.Seconds(), "runs/s")
	b.ReportMetric(bindTime.Seconds(), "bind-s")
	b.ReportMetric(float64(missed), "missed")
	b.ReportMetric(float64(skipped), "skipped")
	b.ReportMetric(float64(stranded), "stranded")
}

func benchOpen(b *testing.B, db *sql.DB, ns string) *benchReplica {
	ctx := context.Background()
	store, err := schedule.NewStore(ctx, db, &schedule.StoreConfig{Namespace: ns})
	require.NoError(b, err)
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: ns})
	require.NoError(b, err)
	return &benchReplica{db: db, store: store, cat: cat}
}

func benchHex(n int) string {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return hex.EncodeToString(p)
}

// benchMem is the heap and the goroutine stacks in use after a GC.
func benchMem() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// benchCPU is this process's CPU time so far (user and system).
func benchCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchTicks is the machine's CPU time from /proc/stat's first line, in
// clock ticks: total and busy (not idle, not waiting for I/O).
type benchTicks struct{ total, busy int64 }

func benchBusy() benchTicks {
	p, err := os.ReadFile("/proc/stat")
	if err != nil {
		return benchTicks{}
	}
	line, _, _ := strings.Cut(string(p), "\n")
	var t benchTicks
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		t.total += v
		if i != 3 && i != 4 { // idle, iowait
			t.busy += v
		}
	}
	return t
}

func (t benchTicks) percentSince(t0 benchTicks) float64 {
	if t.total == t0.total {
		return 0
	}
	return 100 * float64(t.busy-t0.busy) / float64(t.total-t0.total)
}

// benchDBCPU is the CPU time so far of each server backend whose
// application_name starts with app (the replicas' connections), read from
// /proc; nil when the server does not run on this machine (a backend's pid
// is not a local postgres process). USER_HZ is 100 on Linux.
func benchDBCPU(ctx context.Context, b *testing.B, db *sql.DB, app string) map[int]time.Duration {
	if app == "" {
		return nil
	}
	rows, err := db.QueryContext(ctx, `SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, $1)`, app)
	require.NoError(b, err)
	defer rows.Close()
	out := map[int]time.Duration{}
	for rows.Next() {
		var pid int
		require.NoError(b, rows.Scan(&pid))
		p, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		s := string(p)
		i := strings.LastIndexByte(s, ')')
		if err != nil || !strings.Contains(s, " (postgres) ") || i+2 > len(s) {
			return nil
		}
		f := strings.Fields(s[i+2:]) // after the command name: field 3 on
		if len(f) < 13 {
			return nil
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
		st, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
		out[pid] = time.Duration(ut+st) * 10 * time.Millisecond
	}
	require.NoError(b, rows.Err())
	return out
}

// benchEventTotals sums the replicas' event counts by kind.
func benchEventTotals(events []*benchEvents) map[schedule.EventKind]int64 {
	out := map[schedule.EventKind]int64{}
	for _, k := range []schedule.EventKind{schedule.EventMisfired, schedule.EventError, schedule.EventNotPrimary, schedule.EventRefused} {
		for _, e := range events {
			out[k] += e.kind(k)
		}
	}
	return out
}

type benchRow struct {
	job     string
	fireMS  int64
	attempt int
	state   string
	latency time.Duration
}

// benchRows reads the run table's runs of the ticks in [from, to): the
// store's view of each claim (started_at is the claim statement's clock).
func benchRows(ctx context.Context, b *testing.B, db *sql.DB, dbName, ns string, from, to time.Time) []benchRow {
	q := `SELECT job, (extract(epoch FROM fire_at) * 1000)::bigint, attempt, state,
	       (extract(epoch FROM started_at - fire_at) * 1000000)::bigint
	FROM aegis_schedule_run
	WHERE namespace = $1 AND fire_at >= timestamptz 'epoch' + $2 * interval '1 millisecond'
	  AND fire_at < timestamptz 'epoch' + $3 * interval '1 millisecond'`
	if dbName == "sqlite" {
		q = `SELECT job, fire_ms, attempt, state, (started_ms - fire_ms) * 1000 FROM aegis_schedule_run
	WHERE namespace = $1 AND fire_ms >= $2 AND fire_ms < $3`
	}
	rows, err := db.QueryContext(ctx, q, ns, from.UnixMilli(), to.UnixMilli())
	require.NoError(b, err)
	defer rows.Close()
	var out []benchRow
	for rows.Next() {
		var r benchRow
		var us int64
		require.NoError(b, rows.Scan(&r.job, &r.fireMS, &r.attempt, &r.state, &us))
		r.latency = time.Duration(us) * time.Microsecond
		out = append(out, r)
	}
	require.NoError(b, rows.Err())
	return out
}

// benchPct is the p-th percentile of ds in milliseconds (nearest rank); 0
// for none.
func benchPct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p+99)/100 - 1
	return float64(s[max(i, 0)].Microseconds()) / 1000
}
