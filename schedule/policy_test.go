package schedule_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

// waitersThenAdvance advances clock by d once n goroutines wait on it.
func waitersThenAdvance(t testing.TB, clock *schedule.ManualClock, n int, d time.Duration) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		got, changed := clock.Waiters()
		if got >= n {
			clock.Advance(d)
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d of %d waiters on the clock after 5s", got, n)
		}
	}
}

// After the scheduler was down (or paused) for five ticks, each misfire
// policy runs what it promises, then the schedule goes on.
func TestMisfire(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	tests := []struct {
		policy  schedule.Misfire
		want    []time.Time // runs after the outage, before the next on-time tick
		dropped int
	}{
		{schedule.MisfireSkip, nil, 5},
		{schedule.MisfireFireOnce, []time.Time{sec(6)}, 4},
		{schedule.MisfireCatchUp, []time.Time{sec(4), sec(5), sec(6)}, 2},
	}
	for _, tt := range tests {
		for _, restart := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/restart=%v", tt.policy, restart), func(t *testing.T) {
				t.Parallel()
				r := pgReplica(t, pgURL(t))
				clock := schedule.NewManualClock(t0)
				log := &runLog{}
				job := schedule.Job{Name: "misfire", Every: time.Second, Misfire: tt.policy, CatchUpMax: 3, Run: func(ctx context.Context) error {
					log.record(ctx)
					return nil
				}}
				cfg := &schedule.Config{Node: "n", Store: r.store, Clock: clock, OnEvent: log.onEvent}
				s := start(t, cfg, job)
				waitersThenAdvance(t, clock, 1, time.Second)
				waitFor(t, 5*time.Second, func() bool {
					rows, _ := r.store.Runs(t.Context(), "misfire", 10)
					return len(rows) == 1 && rows[0].State == "succeeded" && len(log.eventsOf(schedule.EventDone)) == 1
				}, "the first tick")
				if restart {
					// Down for five ticks: the new scheduler learns the last
					// tick from the run table.
					stop(t, s)
					clock.Advance(5*time.Second + 700*time.Millisecond)
					start(t, cfg, job)
				} else {
					// Paused (or its clock jumped) for five ticks.
					clock.Advance(5*time.Second + 700*time.Millisecond)
				}
				want := append([]time.Time{sec(1)}, tt.want...)
				// The misfire event and every run's Done: for skip, the runs
				// are complete before the scheduler has seen the jump, and a
				// run not yet done would make the next tick an overlap.
				waitFor(t, 5*time.Second, func() bool {
					rows, _ := r.store.Runs(t.Context(), "misfire", 10)
					return len(log.eventsOf(schedule.EventMisfired)) == 1 && len(log.eventsOf(schedule.EventDone)) == len(want) &&
						log.count() == len(want) && len(rows) == len(want) && !rows[0].Ended.IsZero()
				}, "the runs after the outage")
				waitersThenAdvance(t, clock, 1, 300*time.Millisecond) // to sec(7): on time
				want = append(want, sec(7))
				waitFor(t, 5*time.Second, func() bool { return log.count() == len(want) }, "the runs")
				var got []time.Time
				for _, r := range log.snapshot() {
					got = append(got, r.Fire.UTC())
				}
				require.Equal(t, want, got)
				mis := log.eventsOf(schedule.EventMisfired)
				require.Len(t, mis, 1)
				require.Equal(t, tt.dropped, mis[0].Attempt, mis[0].Reason)
			})
		}
	}
}

// The overlap policies, across two schedulers that share the run table
// and a clock: a tick comes while the previous run still goes.
func TestOverlap(t *testing.T) {
	t.Parallel()
	for _, policy := range []schedule.Overlap{schedule.OverlapForbid, schedule.OverlapReplace, schedule.OverlapAllow} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			url := pgURL(t)
			clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			release := make(chan struct{})
			var mu sync.Mutex
			type started struct {
				run       schedule.Run
				cancelled chan struct{}
			}
			var runs []started
			job := schedule.Job{Name: "overlap", Every: time.Second, LockAtMostFor: 600 * time.Millisecond, Overlap: policy, Run: func(ctx context.Context) error {
				r, _ := schedule.RunFrom(ctx)
				s := started{run: r, cancelled: make(chan struct{})}
				mu.Lock()
				runs = append(runs, s)
				mu.Unlock()
				select {
				case <-ctx.Done():
					close(s.cancelled)
					return ctx.Err()
				case <-release:
					return nil
				}
			}}
			var store *schedule.Store
			for i := range 2 {
				r := pgReplica(t, url)
				store = r.store
				start(t, &schedule.Config{Node: fmt.Sprintf("node-%d", i), Store: r.store, Clock: clock, ReapInterval: 50 * time.Millisecond}, job)
			}
			defer close(release)
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(runs) }
			waitersThenAdvance(t, clock, 2, time.Second)
			waitFor(t, 5*time.Second, func() bool { return count() == 1 }, "the first run")
			waitersThenAdvance(t, clock, 2, time.Second)
			rowsOf := func() map[int]string {
				rows, _ := store.Runs(context.Background(), "overlap", 10)
				m := map[int]string{}
				for _, r := range rows {
					m[r.Fire.Second()] = r.State
				}
				return m
			}
			switch policy {
			case schedule.OverlapForbid:
				waitFor(t, 5*time.Second, func() bool { return rowsOf()[2] == "skipped" }, "the second tick recorded as skipped")
				require.Equal(t, 1, count())
				require.Equal(t, "running", rowsOf()[1], "the first run goes on")
			case schedule.OverlapReplace:
				waitFor(t, 5*time.Second, func() bool { return count() == 2 }, "the second run")
				mu.Lock()
				first, second := runs[0], runs[1]
				mu.Unlock()
				select {
				case <-first.cancelled:
				case <-time.After(10 * time.Second):
					t.Fatal("the replaced run was not cancelled within 10s")
				}
				require.Greater(t, second.run.Token, first.run.Token)
				waitFor(t, 10*time.Second, func() bool { return rowsOf()[1] == "replaced" }, "the first run recorded as replaced: %v", rowsOf())
			case schedule.OverlapAllow:
				waitFor(t, 5*time.Second, func() bool { return count() == 2 }, "the second run alongside the first")
				require.Equal(t, map[int]string{1: "running", 2: "running"}, rowsOf())
			}
		})
	}
}

// A private PostgreSQL is stopped under a run-key and a lease-mode
// scheduler: their store calls fail cleanly (error events, no run), and the
// jobs fire again once it is back.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := servers.StartPostgres(ctx, filepath.Join(t.TempDir(), "pg"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	r := pgReplica(t, pg.URL())
	logs := map[string]*runLog{"runkey": {}, "lease": {}}
	job := func(name string) schedule.Job {
		return schedule.Job{Name: name, Every: 300 * time.Millisecond, LockAtMostFor: time.Second, Run: func(ctx context.Context) error {
			logs[name].record(ctx)
			return nil
		}}
	}
	start(t, &schedule.Config{Node: "a", Store: r.store, OnEvent: logs["runkey"].onEvent}, job("runkey"))
	start(t, &schedule.Config{Node: "b", Locker: r.locker, OnEvent: logs["lease"].onEvent}, job("lease"))
	for name, l := range logs {
		waitFor(t, 10*time.Second, func() bool { return l.count() >= 2 }, "%s runs before the outage", name)
	}
	require.NoError(t, pg.Stop())
	before := map[string]int{}
	for name, l := range logs {
		waitFor(t, 10*time.Second, func() bool { return len(l.eventsOf(schedule.EventError)) >= 2 }, "%s reports the outage", name)
		before[name] = l.count()
		for _, e := range l.eventsOf(schedule.EventError) {
			require.NotContains(t, e.Err.Error(), "password")
		}
	}
	// Still down: the schedulers go on trying (two more failed attempts
	// each), and nothing runs.
	for name, l := range logs {
		failed := len(l.eventsOf(schedule.EventError))
		waitFor(t, 10*time.Second, func() bool { return len(l.eventsOf(schedule.EventError)) >= failed+2 }, "%s tries again during the outage", name)
		require.Equal(t, before[name], l.count(), "%s ran during the outage", name)
	}
	require.NoError(t, pg.Start(ctx))
	for name, l := range logs {
		waitFor(t, 20*time.Second, func() bool { return l.count() >= before[name]+2 }, "%s fires again after recovery", name)
	}
}
