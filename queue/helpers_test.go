package queue

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	goleak.VerifyTestMain(m)
}

// pool returns a new pool on the test's own schema (the same schema for
// every call in one test), with the queue's tables.
func pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 8
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.NoError(t, Migrate(t.Context(), p))
	return p
}

// poolWithoutTables returns a pool on a fresh schema without the queue's
// tables.
func poolWithoutTables(t testing.TB) *pgxpool.Pool { return testenv.Postgres(t) }

// testArgs is the kind most tests use.
type testArgs struct {
	N int `json:"n"`
}

func (testArgs) Kind() string { return "test" }

// otherArgs is a second kind.
type otherArgs struct {
	S string `json:"s"`
}

func (otherArgs) Kind() string { return "other" }

// quiet is a logger for tests: warnings and errors only, to the test log.
func quiet(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// client returns a client on p with cfg (Logger defaulted to the test log),
// stopped when the test ends.
func client(t testing.TB, p *pgxpool.Pool, cfg *Config) *Client {
	t.Helper()
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet(t)
	}
	c, err := New(p, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if c.stopped.Load() {
			return // the test stopped it and checked the result
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	return c
}

// stop stops c gracefully within a bound: the running jobs have 20s to
// return.
func stop(t testing.TB, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx), "Stop, with 20s for the running jobs")
}

// workers returns workers with one handler for testArgs.
func workers(fn func(ctx context.Context, job *Job[testArgs]) error) *Workers {
	ws := NewWorkers()
	AddWorker(ws, WorkFunc[testArgs](fn))
	return ws
}

// block waits for ch to be closed, or for d: a handler (or a heartbeat)
// that a test holds is released even when the test fails before releasing
// it, so that the client's Stop returns.
func block(ch <-chan struct{}, d time.Duration) {
	select {
	case <-ch:
	case <-time.After(d):
	}
}

// eventually waits for cond with a bound, polling.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 5*time.Millisecond, "waited for: %s", what)
}

// count runs a count query.
func count(t testing.TB, p *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, p.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// set is a concurrent set of ints.
type set struct {
	mu sync.Mutex
	m  map[int64]int
}

func (s *set) add(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[int64]int{}
	}
	s.m[id]++
}

func (s *set) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *set) get(id int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}
