package pglease_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
)

// The Inspector reads the keys, their holders and grants under the
// configured table, tells a release from an expiry, and creates nothing.
// It is made from the pool the Locker uses (TestInspectorBeforeHolders
// reads through a *sql.DB).
func TestInspector(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	cfg := &pglease.Config{Table: "ops_lease", Holder: "web-1", History: 5}
	in, err := pglease.NewInspectorFromPool(pool, cfg)
	require.NoError(t, err)
	lease, history, err := in.Tables(ctx)
	require.NoError(t, err)
	require.False(t, lease || history, "the inspector creates no table")

	l, err := pglease.New(pool, cfg)
	require.NoError(t, err)
	lease, history, err = in.Tables(ctx)
	require.NoError(t, err)
	require.True(t, lease && history)
	a1, err := l.TryAcquire(ctx, "a", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, a1))
	_, err = l.TryAcquire(ctx, "a", time.Hour)
	require.NoError(t, err)
	b, err := l.TryAcquire(ctx, "b", time.Hour)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, b))
	_, err = l.TryAcquire(ctx, "c", time.Hour)
	require.NoError(t, err)
	// c runs out (a holder that stopped renewing), without a wait.
	_, err = pool.Exec(ctx, `UPDATE ops_lease SET expires_at = now() - interval '1 minute' WHERE key = 'c'`)
	require.NoError(t, err)

	keys, err := in.Keys(ctx, 10)
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.Equal(t, []string{"a", "b", "c"}, []string{keys[0].Key, keys[1].Key, keys[2].Key})
	require.Equal(t, aegis.Token(2), keys[0].Token)
	require.Equal(t, "web-1", keys[0].Holder)
	require.False(t, keys[0].Released)
	require.True(t, keys[0].Expires.After(time.Now().Add(50*time.Minute)))
	require.True(t, keys[1].Released, "a released key")
	require.True(t, keys[1].Expires.Equal(time.Unix(0, 0)), "a release's -infinity reads as the epoch")
	require.False(t, keys[2].Released, "an expired key was not released")
	keys, err = in.Keys(ctx, 1)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	_, err = in.Keys(ctx, 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)

	k, ok, err := in.Key(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, aegis.Token(2), k.Token)
	_, ok, err = in.Key(ctx, "none")
	require.NoError(t, err)
	require.False(t, ok)

	gs, err := in.Grants(ctx, "a", 10)
	require.NoError(t, err)
	require.Len(t, gs, 2)
	require.Equal(t, []aegis.Token{2, 1}, []aegis.Token{gs[0].Token, gs[1].Token}, "the newest first")
	require.Equal(t, "web-1", gs[1].Holder)
	require.False(t, gs[1].Granted.IsZero())

	expired, err := in.Expired(ctx, 10)
	require.NoError(t, err)
	require.Len(t, expired, 1, "a released key did not run out")
	require.Equal(t, "c", expired[0].Key)
	require.True(t, expired[0].Expires.Before(time.Now()))
}

// A table created before holder names reads as keys without holders.
func TestInspectorBeforeHolders(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	_, err := pool.Exec(ctx, `CREATE TABLE aegis_lease (key text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL, granted_at timestamptz NOT NULL);
INSERT INTO aegis_lease VALUES ('k', 'secret', 7, now() + interval '1 minute', now())`)
	require.NoError(t, err)
	in, err := pglease.NewInspector(db, nil)
	require.NoError(t, err)
	lease, history, err := in.Tables(ctx)
	require.NoError(t, err)
	require.True(t, lease)
	require.False(t, history)
	keys, err := in.Keys(ctx, 10)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "", keys[0].Holder)
	require.Equal(t, aegis.Token(7), keys[0].Token)

	_, err = pglease.NewInspector(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = pglease.NewInspector(db, &pglease.Config{Table: "bad-name"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// An Inspector over a pool holds nothing of it between reads: the pool's
// Close does not wait for it, and a read after the pool's Close fails
// (goleak in TestMain: no handle left open). A nil pool names the argument.
func TestInspectorFromPool(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	_, err := pglease.NewInspectorFromPool(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "pool is nil")
	_, err = pglease.NewInspectorFromPool(pool, &pglease.Config{Table: "bad-name"})
	require.ErrorIs(t, err, aegis.ErrInvalid)

	l, err := pglease.New(pool, nil)
	require.NoError(t, err)
	in, err := pglease.NewInspectorFromPool(pool, nil)
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	keys, err := in.Keys(ctx, 10)
	require.NoError(t, err)
	require.Len(t, keys, 1)

	closed := make(chan struct{})
	go func() { pool.Close(); close(closed) }()
	testenv.Recv(t, closed, 30*time.Second, "the pool's Close with an Inspector of it")
	_, err = in.Keys(ctx, 10)
	require.Error(t, err, "a read after the pool's Close")
}
