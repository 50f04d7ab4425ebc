package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestEtcdEndpointForms runs the etcd strategy on endpoints given as bare
// host:port, which etcd's client takes as well as http://host:port, and
// refuses an endpoint in neither form, quoting it (its password masked).
func TestEtcdEndpointForms(t *testing.T) {
	t.Parallel()
	etcd := func(t *testing.T, endpoints []string) *runner.Session {
		testenv.Reserve(t, 1, "a lab session's runs")
		s, err := runner.NewSession(runner.Options{
			Dir:     t.TempDir(),
			Servers: runner.Servers{PostgresURL: testenv.PostgresURL(t), EtcdEndpoints: endpoints},
			NodeEnv: []string{nodeEnv},
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}

	t.Run("bare", func(t *testing.T) {
		t.Parallel()
		var bare []string
		for _, ep := range testenv.EtcdEndpoints(t) {
			hp, ok := strings.CutPrefix(ep, "http://")
			require.True(t, ok, ep)
			bare = append(bare, hp)
		}
		c := short("etcd", true)
		c.TTL, c.Duration = time.Second, 10*c.Tick // etcd leases are whole seconds
		rep, st := run(t, etcd(t, bare), c)
		require.Positive(t, rep.Executions, "the nodes ran ticks under etcd leases")
		requireLabelKept(t, rep, st)
	})

	for _, ep := range []string{"127.0.0.1", "http//127.0.0.1:2379", "ftp://127.0.0.1:2379", "http://127.0.0.1", "127.0.0.1:http", "http://aegis:s3cret@"} {
		t.Run(ep, func(t *testing.T) {
			t.Parallel()
			_, err := etcd(t, []string{ep}).Start(t.Context(), short("etcd", true))
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, "want host:port or http://host:port")
			require.NotContains(t, err.Error(), "s3cret")
			if !strings.Contains(ep, "s3cret") {
				require.ErrorContains(t, err, `"`+ep+`"`)
			}
		})
	}
}
