package schedule_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replica is one replica's connections to the test's database: its own
// pool, as a separate process would have.
type replica struct {
	pool   *pgxpool.Pool
	db     *sql.DB
	store  *schedule.Store
	locker aegis.Locker
}

func pgReplica(t testing.TB, url string) *replica {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close(); pool.Close() })
	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	locker, err := pglease.New(pool, nil)
	require.NoError(t, err)
	return &replica{pool: pool, db: db, store: store, locker: locker}
}

func sqliteReplica(t testing.TB, path string) *replica {
	ctx := context.Background()
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	locker, err := sqlitelease.New(db, nil)
	require.NoError(t, err)
	return &replica{db: db, store: store, locker: locker}
}

func sqlitePath(t testing.TB) string { return filepath.Join(t.TempDir(), "schedule.db") }

// runLog records the runs of a job across replicas.
type runLog struct {
	mu     sync.Mutex
	runs   []schedule.Run
	events []schedule.Event
	active int
	peak   int // most runs at once
}

func (l *runLog) record(ctx context.Context) {
	r, _ := schedule.RunFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, r)
}

func (l *runLog) enter() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active++
	l.peak = max(l.peak, l.active)
}

func (l *runLog) exit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active--
}

func (l *runLog) onEvent(e schedule.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *runLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}

func (l *runLog) snapshot() []schedule.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]schedule.Run(nil), l.runs...)
}

func (l *runLog) eventsOf(kind schedule.EventKind) []schedule.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []schedule.Event
	for _, e := range l.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// perTick counts runs per fire time.
func (l *runLog) perTick() map[time.Time]int {
	m := map[time.Time]int{}
	for _, r := range l.snapshot() {
		m[r.Fire.UTC()]++
	}
	return m
}

func sortedTicks(m map[time.Time]int) []time.Time {
	var ts []time.Time
	for t := range m {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

func start(t testing.TB, cfg *schedule.Config, jobs ...schedule.Job) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(cfg)
	require.NoError(t, err)
	want := schedule.ModeRunKey
	if cfg.Locker != nil {
		want = schedule.ModeLease
	}
	require.Equal(t, want, s.Mode(), "the mode of the Config field given")
	for _, j := range jobs {
		require.NoError(t, s.Add(j))
	}
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { stop(t, s) })
	return s
}

// waitFor polls cond every 10ms for at most d.
func waitFor(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, d, 10*time.Millisecond, append([]any{msg}, args...)...)
}

func pgURL(t testing.TB) string { return testenv.PostgresURL(t) }

// stop stops s within a bound: the test fails when its jobs do not return
// within 30s of their contexts' end.
func stop(t testing.TB, s *schedule.Scheduler) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	testenv.Recv(t, done, 30*time.Second, "the scheduler to stop")
}

// block waits for ch to be closed, or for d: a job that a test holds
// (paused) is released even when the test fails before releasing it, so
// the scheduler's Stop does not wait forever.
func block(ch <-chan struct{}, d time.Duration) {
	select {
	case <-ch:
	case <-time.After(d):
	}
}

// eachDialect runs f in parallel subtests "postgres" and "sqlite", each
// with a replica of its own on a fresh store; db is the subtest's name.
func eachDialect(t *testing.T, f func(t *testing.T, db string, r *replica)) {
	for _, db := range []string{"postgres", "sqlite"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			if db == "postgres" {
				f(t, db, pgReplica(t, pgURL(t)))
			} else {
				f(t, db, sqliteReplica(t, sqlitePath(t)))
			}
		})
	}
}
