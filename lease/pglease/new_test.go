package pglease_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
)

// TestNewOnSilentServer runs New and Migrate against a server that accepts
// connections and never answers (a listener that never calls Accept): New
// gives up at its own documented bound and Migrate when its context ends,
// each naming the server as host:port and never the URL's password.
func TestNewOnSilentServer(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	addr := silent.Addr().String()
	pool, err := pgxpool.New(context.Background(), "postgres://aegis:s3cret@"+addr+"/aegis?sslmode=disable")
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	done := make(chan error, 1)
	go func() { _, err := pglease.New(pool, nil); done <- err }()
	err = testenv.Recv(t, done, time.Minute, "New on a silent server to give up")
	require.ErrorContains(t, err, "PostgreSQL at "+addr)
	require.ErrorContains(t, err, "no answer within 10s, New's bound (call Migrate with a context of your own, then New with Config.SkipMigrate)")
	require.NotContains(t, err.Error(), "s3cret")

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err = pglease.Migrate(ctx, pool, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "PostgreSQL at "+addr)
	require.NotContains(t, err.Error(), "s3cret")
}

// TestSkipMigrate: New with Config.SkipMigrate creates nothing, says to run
// Migrate when the table is missing, and works once Migrate has run.
func TestSkipMigrate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.Postgres(t) // a fresh schema
	cfg := &pglease.Config{SkipMigrate: true}
	_, err := pglease.New(pool, cfg)
	require.ErrorContains(t, err, "table aegis_lease is missing (Config.SkipMigrate is set: run Migrate first)")
	require.ErrorContains(t, err, "PostgreSQL at ")

	require.NoError(t, pglease.Migrate(ctx, pool, nil))
	l, err := pglease.New(pool, cfg)
	require.NoError(t, err)
	lease, err := l.TryAcquire(ctx, testenv.Key(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, lease))
}
