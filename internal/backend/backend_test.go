package backend_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/backend"
	"github.com/aegislab/aegis/internal/testenv"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	s := backend.FromEnv()
	s.PostgresURL = testenv.PostgresURL(t)
	s.SQLitePath = filepath.Join(t.TempDir(), "lease.db")
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			l, closeFn, err := backend.Open(t.Context(), name, s)
			require.NoError(t, err)
			defer closeFn()
			lease, err := l.TryAcquire(t.Context(), "backend-test/"+t.Name()+time.Now().String(), time.Second)
			require.NoError(t, err)
			require.NoError(t, l.Release(t.Context(), lease))
		})
	}
	_, _, err := backend.Open(t.Context(), "nope", s)
	require.ErrorContains(t, err, `unknown backend "nope" (known: `)
}
