package schedule_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/schedule"
)

// A scheduler built from one pgx pool alone: the store, the catalog (seeded
// with Ensure) and the run reader are the pool's, with no *sql.DB in the
// program. Their Close ends their bridges, not the pool, which serves on;
// the pool's Close does not wait for a value left open.
func TestSchedulerFromOnePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	store, err := schedule.NewStoreFromPool(ctx, pool, nil)
	require.NoError(t, err)
	cat, err := schedule.NewCatalogFromPool(ctx, pool, &schedule.CatalogConfig{EditDelay: time.Millisecond})
	require.NoError(t, err)
	runs, err := schedule.NewRunReaderFromPool(ctx, pool, nil)
	require.NoError(t, err)
	ran := make(chan json.RawMessage, 1)
	s, err := schedule.New(&schedule.Config{Node: "n1", Store: store, Catalog: cat})
	require.NoError(t, err)
	require.NoError(t, s.Handle("invoice", func(_ context.Context, args json.RawMessage) error {
		select {
		case ran <- args:
		default:
		}
		return nil
	}))
	require.NoError(t, s.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop(t, s)
		}
	})
	_, err = cat.Ensure(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "invoice", Args: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	select {
	case args := <-ran:
		require.JSONEq(t, `{"n":1}`, string(args))
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30s for a run of the ensured schedule")
	}
	waitFor(t, 30*time.Second, func() bool {
		rs, err := runs.Latest(ctx, "tick", 10)
		require.NoError(t, err)
		for _, r := range rs {
			if r.State == "succeeded" {
				return true
			}
		}
		return false
	}, "the run reader reads a succeeded run of tick back")
	rec, err := store.Runs(ctx, "tick", 1)
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Equal(t, "n1", rec[0].Node)

	stop(t, s)
	stopped = true
	require.NoError(t, store.Close())
	require.NoError(t, cat.Close())
	require.NoError(t, store.Close(), "a second Close")
	_, err = store.Runs(ctx, "tick", 1)
	require.Error(t, err, "the store after its Close")
	_, err = cat.Get(ctx, "tick")
	require.Error(t, err, "the catalog after its Close")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM aegis_schedule WHERE name = 'tick'").Scan(&n),
		"the pool serves on after the store's and the catalog's Close")
	require.Equal(t, 1, n)

	// The run reader is still open: the pool's Close does not wait for it.
	closed := make(chan struct{})
	go func() { pool.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the pool's Close waited 30s for a run reader left open")
	}
	_, err = runs.Latest(ctx, "tick", 1)
	require.Error(t, err, "a read after the pool's Close")
	require.NoError(t, runs.Close())
}

// A nil pool is ErrInvalid naming the argument, and bad config is
// refused after the bridge opened without leaking it (goleak in TestMain).
// A value of the *sql.DB forms does not close the caller's handle.
func TestFromPoolInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := schedule.NewStoreFromPool(ctx, nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "NewStoreFromPool: pool is nil")
	_, err = schedule.NewCatalogFromPool(ctx, nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "NewCatalogFromPool: pool is nil")
	_, err = schedule.NewRunReaderFromPool(ctx, nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "NewRunReaderFromPool: pool is nil")

	r := pgReplica(t, pgURL(t))
	_, err = schedule.NewStoreFromPool(ctx, r.pool, &schedule.StoreConfig{Namespace: "Bad Namespace"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "StoreConfig.Namespace")
	_, err = schedule.NewCatalogFromPool(ctx, r.pool, &schedule.CatalogConfig{EditDelay: -time.Second})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "CatalogConfig.EditDelay")
	_, err = schedule.NewRunReaderFromPool(ctx, r.pool, &schedule.StoreConfig{Table: "bad-name"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "StoreConfig.Table")

	cat, err := schedule.NewCatalog(ctx, r.db, nil)
	require.NoError(t, err)
	runs, err := schedule.NewRunReader(ctx, r.db, nil)
	require.NoError(t, err)
	require.NoError(t, r.store.Close())
	require.NoError(t, cat.Close())
	require.NoError(t, runs.Close())
	require.NoError(t, r.db.PingContext(ctx), "the caller's *sql.DB stays open")
	_, err = r.store.Runs(ctx, "none", 1)
	require.NoError(t, err, "a Store of NewStore serves on after its Close")
}
