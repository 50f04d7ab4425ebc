package pglease_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pool is a pool of its own on the test database's public schema: every
// locktest instance gets one, as separate processes would.
func pool(t *testing.T) *pgxpool.Pool { return testenvPool(t) }

func testenvPool(t testing.TB) *pgxpool.Pool {
	p, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	locktest.Run(t, locktest.Config{
		// A pool per instance, as separate processes would have.
		New: func(t *testing.T) aegis.Locker {
			l, err := pglease.New(pool(t), nil)
			require.NoError(t, err)
			return l
		},
		TTL: time.Second,
	})
}
