package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/schedule"
)

// The binder's LISTEN connection never goes back to a pgx pool still
// listening: over stdlib.OpenDBFromPool, discarding a database/sql
// connection releases it to the pool, which kept it, with its LISTEN, for
// the pool's next user (whose connection then buffered every change's
// NOTIFY for ever).
func TestBinderLeavesNoListenInThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	// A table of this test's own names the NOTIFY channel, which the
	// server's other sessions do not share.
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Table: "listen_leak"})
	require.NoError(t, err)
	s, err := schedule.New(&schedule.Config{Node: "n1", Store: store, Catalog: cat})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop(t, s)
		}
	})

	listening := func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN "aegis_schedule_listen_leak"'`).Scan(&n)
		require.NoError(t, err)
		return n > 0
	}
	waitFor(t, 30*time.Second, listening, "the binder's LISTEN on the catalog's channel")
	stop(t, s)
	stopped = true

	conns := pool.AcquireAllIdle(ctx)
	require.NotEmpty(t, conns)
	channels := make([]int, len(conns))
	errs := make([]error, len(conns))
	for i, c := range conns {
		errs[i] = c.QueryRow(ctx, "SELECT count(*) FROM pg_listening_channels()").Scan(&channels[i])
		c.Release() // all back before any assertion, or the pool's Close would wait for them
	}
	for i := range conns {
		require.NoError(t, errs[i])
		require.Zero(t, channels[i], "a connection of the pool still LISTENs after the scheduler stopped")
	}
}
