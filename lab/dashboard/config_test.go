package dashboard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lab"
	"github.com/aegislab/aegis/lab/dashboard"
)

// A nil session and a bad MaxActive are the caller's mistakes, said at New.
func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	_, err := dashboard.New(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "session is nil")

	s, err := lab.NewSession(lab.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	_, err = dashboard.New(s, &dashboard.Config{MaxActive: -1})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "MaxActive -1")
	d, err := dashboard.New(s, nil) // nil: the defaults
	require.NoError(t, err)
	require.NoError(t, d.Close())
}
