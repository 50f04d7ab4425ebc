package sqlitelease_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// TestNewWaitsForAnotherWriter runs New on a handle not opened by Open (no
// busy timeout of its own) while another handle holds the database's write
// lock: the migration waits for it as acquisitions do, up to
// Config.BusyTimeout, then fails saying so; once the lock is released it
// succeeds. The handle's own busy timeout is left as it was.
func TestNewWaitsForAnotherWriter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "lease.db")
	holder := open(t, path)
	conn, err := holder.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "CREATE TABLE other_writer (id integer)")
	require.NoError(t, err)

	plain, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	plain.SetMaxOpenConns(1) // one connection: the one whose busy timeout is checked below

	const bound = 300 * time.Millisecond
	start := time.Now()
	_, err = sqlitelease.New(plain, &sqlitelease.Config{BusyTimeout: bound})
	require.ErrorContains(t, err, "another connection or process held the database's write lock for longer than Config.BusyTimeout (300ms)")
	require.ErrorContains(t, err, "SQLITE_BUSY")
	require.GreaterOrEqual(t, time.Since(start), bound, "New waited for the write lock")

	done := make(chan error, 1)
	go func() { _, err := sqlitelease.New(plain, nil); done <- err }()
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	require.NoError(t, testenv.Recv(t, done, time.Minute, "New once the write lock is released"))

	var busy int
	require.NoError(t, plain.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy))
	require.Zero(t, busy, "the handle's busy timeout is left as it was")
}

// TestSkipMigrate: New with Config.SkipMigrate creates nothing (the first
// operation says the table is missing), and works once Migrate has run.
func TestSkipMigrate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	cfg := &sqlitelease.Config{SkipMigrate: true}
	l, err := sqlitelease.New(db, cfg)
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx, testenv.Key(t), time.Second)
	require.ErrorContains(t, err, "no such table: aegis_lease")

	require.NoError(t, sqlitelease.Migrate(ctx, db, nil))
	lease, err := l.TryAcquire(ctx, testenv.Key(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, lease))
}
