package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/schedule"
)

// catalogRun is one run of a catalog handler, as the handler saw it.
type catalogRun struct {
	node    string
	run     schedule.Run
	started time.Time
}

type catalogLog struct {
	mu   sync.Mutex
	runs []catalogRun
}

func (l *catalogLog) handler(node string) schedule.Handler {
	return func(ctx context.Context, args json.RawMessage) error {
		r, _ := schedule.RunFrom(ctx)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.runs = append(l.runs, catalogRun{node: node, run: r, started: time.Now()})
		return nil
	}
}

func (l *catalogLog) snapshot() []catalogRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]catalogRun(nil), l.runs...)
}

// perTick counts the runs of job per fire time.
func (l *catalogLog) perTick(job string) map[time.Time]int {
	m := map[time.Time]int{}
	for _, r := range l.snapshot() {
		if r.run.Job == job {
			m[r.run.Fire]++
		}
	}
	return m
}

func openCatalog(t testing.TB, r *replica, cfg *schedule.CatalogConfig) *schedule.Catalog {
	t.Helper()
	c, err := schedule.NewCatalog(context.Background(), r.db, cfg)
	require.NoError(t, err)
	return c
}

// Three replicas bind a schedule put while they run; an edit of its spec,
// a pause, a resume and a delete reach every one, and every tick runs once.
func TestCatalogEditsWhileReplicasRun(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"postgres", "sqlite"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var open func() *replica
			if db == "postgres" {
				url := pgURL(t)
				open = func() *replica { return pgReplica(t, url) }
			} else {
				path := sqlitePath(t)
				open = func() *replica { return sqliteReplica(t, path) }
			}
			ctx := context.Background()
			log := &catalogLog{}
			var admin *schedule.Catalog
			for i := range 3 {
				r := open()
				cat := openCatalog(t, r, nil)
				admin = cat
				node := fmt.Sprintf("node-%d", i)
				s, err := schedule.New(&schedule.Config{Node: node, Store: r.store, Catalog: cat})
				require.NoError(t, err)
				require.NoError(t, s.Handle("echo", log.handler(node)))
				code := log.handler(node)
				require.NoError(t, s.Add(schedule.Job{Name: "code-tick", Every: time.Second, Run: func(ctx context.Context) error { return code(ctx, nil) }}))
				require.NoError(t, s.Start(ctx))
				t.Cleanup(func() { stop(t, s) })
			}
			e, err := admin.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo", Args: json.RawMessage(`{"n":1}`)})
			require.NoError(t, err)
			require.Equal(t, "@every 1s", e.Spec())
			waitFor(t, 30*time.Second, func() bool { return len(log.perTick("tick")) >= 4 }, "four ticks of the new schedule run")
			for _, r := range log.snapshot() {
				if r.run.Job != "tick" {
					continue
				}
				require.False(t, r.run.Fire.Before(e.EffectiveAt), "run %+v before the schedule took effect at %s", r.run, e.EffectiveAt)
				require.JSONEq(t, `{"n":1}`, string(r.run.Args))
			}

			// Edit: every 2s from the instant in the row.
			e2, err := admin.Put(ctx, schedule.Entry{Name: "tick", Every: 2 * time.Second, Handler: "echo", Args: json.RawMessage(`{"n":2}`)})
			require.NoError(t, err)
			require.Equal(t, "@every 1s", e2.Previous)
			waitFor(t, 30*time.Second, func() bool {
				for f := range log.perTick("tick") {
					if f.After(e2.EffectiveAt.Add(2 * time.Second)) {
						return true
					}
				}
				return false
			}, "two ticks of the edited spec run")
			ticks := log.perTick("tick")
			for _, f := range sortedTicks(ticks) {
				require.Equal(t, 1, ticks[f], "tick %s ran %d times", f, ticks[f])
				if !f.Before(e2.EffectiveAt) {
					require.Zero(t, f.UnixMilli()%2000, "tick %s after the edit took effect (%s) follows the new spec", f, e2.EffectiveAt)
				}
			}

			// Pause: nothing starts after Pause returned.
			requirePauseHolds(t, admin, log, "tick")
			_, err = admin.Resume(ctx, "tick")
			require.NoError(t, err)
			resumed := time.Now()
			waitFor(t, 30*time.Second, func() bool {
				for _, r := range log.snapshot() {
					if r.run.Job == "tick" && r.started.After(resumed) {
						return true
					}
				}
				return false
			}, "a run after Resume")
			require.NoError(t, admin.Delete(ctx, "tick"))
			deleted := time.Now()
			time.Sleep(3 * time.Second)
			for _, r := range log.snapshot() {
				require.False(t, r.run.Job == "tick" && r.started.After(deleted), "run %+v started after Delete returned", r.run)
			}
			ticks = log.perTick("tick")
			for _, f := range sortedTicks(ticks) {
				require.Equal(t, 1, ticks[f], "tick %s ran %d times", f, ticks[f])
			}
			// The job added in code ran beside the catalog's, once per tick.
			code := log.perTick("code-tick")
			require.Greater(t, len(code), 10)
			for _, f := range sortedTicks(code) {
				require.Equal(t, 1, code[f], "code tick %s ran %d times", f, code[f])
			}
		})
	}
}
