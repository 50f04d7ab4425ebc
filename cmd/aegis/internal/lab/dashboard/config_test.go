package dashboard_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// A nil session and a bad MaxActive are the caller's mistakes, said at New.
func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	_, err := dashboard.New(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "session is nil")

	s, err := runner.NewSession(runner.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	_, err = dashboard.New(s, &dashboard.Config{MaxActive: -1})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "MaxActive -1")
	d, err := dashboard.New(s, nil) // nil: the defaults
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

// A PostgreSQL that is down makes the strategies unavailable with its
// address and the cause, never its URL's password.
func TestAvailabilityHidesThePassword(t *testing.T) {
	t.Parallel()
	h := newHarnessOn(t, runner.Servers{
		PostgresURL:   "postgres://aegis:s3cretpw@127.0.0.1:1/x?sslmode=disable",
		RedisAddrs:    testenv.RedisAddrs(t),
		EtcdEndpoints: testenv.EtcdEndpoints(t),
		ZKServers:     testenv.ZKServers(t),
		NATSURLs:      testenv.NATSURLs(t),
	}, nil)
	code, b := h.do(http.MethodGet, "/api/availability", nil)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var avail map[string]string
	require.NoError(t, json.Unmarshal(b, &avail), "%s", b)
	require.Contains(t, avail["pg-lease"], "PostgreSQL at 127.0.0.1:1: connection refused")
	require.NotContains(t, string(b), "s3cretpw")
	require.NotContains(t, string(b), "aegis:")
}
