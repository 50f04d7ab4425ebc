package schedule_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// Ready is closed once the catalog is bound; a schedule bound late (a
// starved replica's first read of the catalog) has the ticks since Start
// due, so the ones past their starting deadline are reported misfired
// instead of being skipped without a word.
func TestCatalogReadyAndLateFirstBind(t *testing.T) {
	t.Parallel()
	r := pgReplica(t, pgURL(t))
	ctx := t.Context()
	cat := openCatalog(t, r, &schedule.CatalogConfig{EditDelay: 100 * time.Millisecond})
	_, err := cat.Put(ctx, schedule.Entry{Name: "late", Every: 100 * time.Millisecond, Handler: "noop"})
	require.NoError(t, err)

	const stall = 1500 * time.Millisecond
	var (
		mu       sync.Mutex
		misfired []schedule.Event
		boundAt  time.Time
	)
	s, err := schedule.New(&schedule.Config{Node: "n", Locker: r.locker, Catalog: cat, OnEvent: func(e schedule.Event) {
		switch {
		case e.Kind == schedule.EventBound && e.Job == "late":
			// The binder is starved here, between Start and the job's
			// timers: the ticks of this second fall in the gap.
			time.Sleep(stall)
			mu.Lock()
			boundAt = time.Now()
			mu.Unlock()
		case e.Kind == schedule.EventMisfired && e.Job == "late":
			mu.Lock()
			misfired = append(misfired, e)
			mu.Unlock()
		}
	}})
	require.NoError(t, err)
	require.NoError(t, s.Handle("noop", func(context.Context, json.RawMessage) error { return nil }))
	started := time.Now()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(s.Stop)
	testenv.Recv(t, s.Ready(), 15*time.Second, "Ready once the catalog is bound")
	mu.Lock()
	require.False(t, boundAt.IsZero(), "Ready closed before the schedule was bound")
	mu.Unlock()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range misfired {
			if !e.Fire.Before(started.Add(-time.Millisecond)) && e.Fire.Before(boundAt) && e.Attempt >= 3 {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "a misfire of the ticks between Start and the late bind (%s of 100 ms ticks)", stall)

	// Without a catalog, Ready is closed at Start.
	plain, err := schedule.New(&schedule.Config{Node: "p", Locker: r.locker})
	require.NoError(t, err)
	require.NoError(t, plain.Start(ctx))
	t.Cleanup(plain.Stop)
	testenv.Recv(t, plain.Ready(), time.Second, "Ready at once without a catalog")
}
