package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/schedule"
)

// Three replicas, each with its own connections and a running scheduler,
// call Ensure at the same moment (a barrier), as replicas starting
// together seed the catalog: the schedule is created once, at version 1,
// and every replica binds it once. Ensuring it again changes nothing; an
// Ensure with another handler is refused with ErrExists and changes
// nothing either.
func TestEnsureReplicasStartingTogether(t *testing.T) {
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
			var (
				mu    sync.Mutex
				bound = map[string][]schedule.Event{} // node/job: its EventBound events
			)
			boundOf := func(node, job string) []schedule.Event {
				mu.Lock()
				defer mu.Unlock()
				return append([]schedule.Event(nil), bound[node+"/"+job]...)
			}
			want := schedule.Entry{Name: "nightly", Cron: "0 0 2 * * *", TZ: "Europe/Berlin", Handler: "invoice",
				Args: json.RawMessage(`{"month": "2026-10"}`)}
			cats := make([]*schedule.Catalog, 3)
			for i := range cats {
				r := open()
				cats[i] = openCatalog(t, r, nil)
				node := fmt.Sprintf("node-%d", i)
				s, err := schedule.New(&schedule.Config{Node: node, Store: r.store, Catalog: cats[i], OnEvent: func(e schedule.Event) {
					if e.Kind == schedule.EventBound {
						mu.Lock()
						bound[node+"/"+e.Job] = append(bound[node+"/"+e.Job], e)
						mu.Unlock()
					}
				}})
				require.NoError(t, err)
				require.NoError(t, s.Handle("invoice", func(context.Context, json.RawMessage) error { return nil }))
				require.NoError(t, s.Start(ctx))
				t.Cleanup(func() { stop(t, s) })
			}

			barrier := make(chan struct{})
			got := make([]schedule.Entry, len(cats))
			errs := make([]error, len(cats))
			var wg sync.WaitGroup
			for i, cat := range cats {
				wg.Add(1)
				go func() {
					defer wg.Done()
					select {
					case <-barrier:
					case <-ctx.Done():
						errs[i] = fmt.Errorf("the barrier never opened: %w", ctx.Err())
						return
					}
					got[i], errs[i] = cat.Ensure(ctx, want)
				}()
			}
			close(barrier)
			wg.Wait()
			for i := range cats {
				require.NoError(t, errs[i], "replica %d", i)
				require.Equal(t, int64(1), got[i].Version, "replica %d", i)
				require.Equal(t, got[0].Created, got[i].Created, "replica %d", i)
				require.Equal(t, "0 0 2 * * * (Europe/Berlin)", got[i].Spec())
			}

			// A restart's Ensure: equal (the args' white space is not a
			// change), nothing written.
			again, err := cats[1].Ensure(ctx, schedule.Entry{Name: "nightly", Cron: "0 0 2 * * *", TZ: "Europe/Berlin", Handler: "invoice",
				Args: json.RawMessage(`{"month":"2026-10"}`)})
			require.NoError(t, err)
			require.Equal(t, int64(1), again.Version)
			require.Equal(t, got[0].Updated, again.Updated)

			// Another deploy's entry: refused, the stored one returned.
			other := want
			other.Handler = "invoice-v2"
			stored, err := cats[2].Ensure(ctx, other)
			require.ErrorIs(t, err, schedule.ErrExists)
			require.NotErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, `Handler: "invoice" → "invoice-v2"`)
			require.Equal(t, "invoice", stored.Handler)
			require.Equal(t, int64(1), stored.Version)

			// A later edit every replica binds: by then each has seen every
			// change before it, and bound nightly once, at version 1. A
			// replica that reads both rows at once binds them one after the
			// other, in any order: the test waits for both (a rebind of
			// nightly would unbind it first, before any bind of that read).
			_, err = cats[0].Put(ctx, schedule.Entry{Name: "marker", Every: time.Hour, Handler: "invoice"})
			require.NoError(t, err)
			for i := range cats {
				node := fmt.Sprintf("node-%d", i)
				waitFor(t, 30*time.Second, func() bool { return len(boundOf(node, "marker")) > 0 && len(boundOf(node, "nightly")) > 0 },
					"%s binds marker and nightly", node)
				evs := boundOf(node, "nightly")
				require.Len(t, evs, 1, "%s: nightly's bind events %+v", node, evs)
				require.Equal(t, aegis.Token(1), evs[0].Token, "%s: %+v", node, evs[0])
				require.True(t, strings.HasPrefix(evs[0].Reason, "bound "), "%s: %+v", node, evs[0])
			}
			e, err := cats[0].Get(ctx, "nightly")
			require.NoError(t, err)
			require.Equal(t, int64(1), e.Version)
		})
	}
}

// Ensure refuses what Put refuses, naming the field, and writes nothing;
// a paused schedule that is otherwise equal stays paused; Changes lists
// each field that differs, with Put's defaults filled.
func TestEnsureInputAndChanges(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db string, r *replica) {
		ctx := context.Background()
		cat := openCatalog(t, r, &schedule.CatalogConfig{Namespace: "ensure"})
		for _, c := range []struct {
			e     schedule.Entry
			field string
		}{
			{schedule.Entry{Name: "", Every: time.Second, Handler: "h"}, "Entry.Name"},
			{schedule.Entry{Name: "n", Handler: "h"}, "Entry.Cron and Entry.Every"},
			{schedule.Entry{Name: "n", Cron: "61 * * * * *", Handler: "h"}, "Entry.Cron"},
			{schedule.Entry{Name: "n", Every: time.Second}, "Entry.Handler"},
			{schedule.Entry{Name: "n", Every: time.Second, Handler: "h", Args: json.RawMessage(`{`)}, "Entry.Args"},
		} {
			_, err := cat.Ensure(ctx, c.e)
			require.ErrorIs(t, err, aegis.ErrInvalid, "%+v", c.e)
			require.ErrorContains(t, err, c.field)
		}
		_, err := cat.Get(ctx, "n")
		require.ErrorIs(t, err, schedule.ErrNotFound, "a refused Ensure wrote nothing")

		e := schedule.Entry{Name: "n", Every: time.Minute, Handler: "h"}
		created, err := cat.Ensure(ctx, e)
		require.NoError(t, err)
		_, err = cat.Pause(ctx, "n")
		require.NoError(t, err)
		kept, err := cat.Ensure(ctx, e)
		require.NoError(t, err)
		require.True(t, kept.Paused, "Ensure leaves a pause")
		require.Equal(t, created.Version+1, kept.Version, "the pause's version, no other")

		changes, err := schedule.Changes(kept, e)
		require.NoError(t, err)
		require.Empty(t, changes, "defaults filled as Put fills them")
		changes, err = schedule.Changes(kept, schedule.Entry{Name: "n", Cron: "0 * * * * *", Handler: "h", MaxAttempts: 5, DisableKeepAlive: true})
		require.NoError(t, err)
		require.Equal(t, []string{`Spec: "@every 1m0s" → "0 * * * * * (UTC)"`, "MaxAttempts: 3 → 5", "DisableKeepAlive: false → true"}, changes)
		_, err = schedule.Changes(kept, schedule.Entry{Name: "n", Every: time.Minute})
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.True(t, errors.Is(err, aegis.ErrInvalid) && strings.Contains(err.Error(), "Entry.Handler"), "%v", err)
	})
}
