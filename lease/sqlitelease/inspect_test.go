package sqlitelease_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// The Inspector reads the keys, their holders and grants under the
// configured table, tells a release from an expiry, and creates nothing.
func TestInspector(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	cfg := &sqlitelease.Config{Table: "ops_lease", Holder: "web-1", History: 5}
	in, err := sqlitelease.NewInspector(db, cfg)
	require.NoError(t, err)
	lease, history, err := in.Tables(ctx)
	require.NoError(t, err)
	require.False(t, lease || history, "the inspector creates no table")

	l, err := sqlitelease.New(db, cfg)
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

	keys, err := in.Keys(ctx, 10)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "a", keys[0].Key)
	require.Equal(t, aegis.Token(2), keys[0].Token)
	require.Equal(t, "web-1", keys[0].Holder)
	require.False(t, keys[0].Released)
	require.True(t, keys[0].Expires.After(time.Now().Add(50*time.Minute)))
	require.WithinDuration(t, time.Now(), keys[0].Granted, time.Minute)
	require.True(t, keys[1].Released, "a released key")
	_, err = in.Keys(ctx, 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)

	k, ok, err := in.Key(ctx, "b")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, aegis.Token(1), k.Token)
	_, ok, err = in.Key(ctx, "none")
	require.NoError(t, err)
	require.False(t, ok)

	gs, err := in.Grants(ctx, "a", 10)
	require.NoError(t, err)
	require.Equal(t, []aegis.Token{2, 1}, []aegis.Token{gs[0].Token, gs[1].Token}, "the newest first")
	require.Equal(t, "web-1", gs[1].Holder)
	gs, err = in.Grants(ctx, "a", 1)
	require.NoError(t, err)
	require.Len(t, gs, 1)
}

// A table created before holder names reads as keys without holders.
func TestInspectorBeforeHolders(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	_, err := db.ExecContext(ctx, `CREATE TABLE aegis_lease (key TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL, expires_ms INTEGER NOT NULL, granted_ms INTEGER NOT NULL)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO aegis_lease VALUES ('k', 'secret', 7, ?, ?)`, time.Now().Add(time.Minute).UnixMilli(), time.Now().UnixMilli())
	require.NoError(t, err)
	in, err := sqlitelease.NewInspector(db, nil)
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
	_, err = sqlitelease.NewInspector(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
}
