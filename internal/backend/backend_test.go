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

func TestRedlockAddrs(t *testing.T) {
	t.Parallel()
	six := []string{"a:1", "b:2", "c:3", "d:4", "e:5", "f:6"}
	tests := []struct {
		in, want []string
	}{
		{six, six[1:]}, // the shared set: the first is the single-node one
		{append(six, "g:7"), append(six, "g:7")[1:]},
		{six[:5], six[:5]}, // five or fewer: all of them
		{six[:3], six[:3]},
		{[]string{"a:1", " b:2 ", "", "c:3"}, []string{"a:1", "b:2", "c:3"}},
		{[]string{""}, nil},
		{nil, nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, backend.RedlockAddrs(tt.in), "%q", tt.in)
	}
}
