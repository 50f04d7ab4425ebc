package lab_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lab"
)

func TestParseChaos(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		want lab.Chaos
	}{
		{"pause:holder@3s+2.5s", lab.Chaos{Kind: lab.Pause, Target: "holder", At: 3 * time.Second, For: 2500 * time.Millisecond}},
		{"pause:node2@0s+1s", lab.Chaos{Kind: lab.Pause, Target: "node2", For: time.Second}},
		{"kill:holder@5s", lab.Chaos{Kind: lab.Kill, Target: "holder", At: 5 * time.Second}},
		{"kill:node12@100ms", lab.Chaos{Kind: lab.Kill, Target: "node12", At: 100 * time.Millisecond}},
		{"failover:redis@4s", lab.Chaos{Kind: lab.Failover, Target: "redis", At: 4 * time.Second}},
		{"restart:redis@1m", lab.Chaos{Kind: lab.Restart, Target: "redis", At: time.Minute}},
		{"partition:node1@2s+3s", lab.Chaos{Kind: lab.Partition, Target: "node1", At: 2 * time.Second, For: 3 * time.Second}},
		{"partition:holder@2s+3s", lab.Chaos{Kind: lab.Partition, Target: "holder", At: 2 * time.Second, For: 3 * time.Second}},
		{"skew:node2=+500ms", lab.Chaos{Kind: lab.Skew, Target: "node2", Offset: 500 * time.Millisecond}},
		{"skew:node3=-2s", lab.Chaos{Kind: lab.Skew, Target: "node3", Offset: -2 * time.Second}},
		{"skew:node1=750ms", lab.Chaos{Kind: lab.Skew, Target: "node1", Offset: 750 * time.Millisecond}},
		{"latency:redis=20ms", lab.Chaos{Kind: lab.Latency, Target: "redis", Offset: 20 * time.Millisecond}},
		{"latency:pg=5ms", lab.Chaos{Kind: lab.Latency, Target: "postgres", Offset: 5 * time.Millisecond}},
		{"latency:zk=1s", lab.Chaos{Kind: lab.Latency, Target: "zookeeper", Offset: time.Second}},
	}
	for _, tt := range tests {
		got, err := lab.ParseChaos(tt.spec)
		require.NoError(t, err, tt.spec)
		require.Equal(t, tt.want, got, tt.spec)
		again, err := lab.ParseChaos(got.String())
		require.NoError(t, err, "%s → %s", tt.spec, got)
		require.Equal(t, got, again)
	}
}

func TestParseChaosErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, want string }{
		{"", "want KIND:TARGET"},
		{"pause", "want KIND:TARGET"},
		{"nap:holder@1s+1s", `unknown kind "nap"`},
		{"pause:holder", "missing @AT"},
		{"pause:holder@3s", "missing +FOR"},
		{"pause:holder@3s+", "FOR is empty"},
		{"pause:holder@3s+0s", "FOR 0s must be positive"},
		{"pause:holder@-1s+1s", "AT -1s is negative"},
		{"pause:holder@soon+1s", `AT "soon" is not a duration`},
		{"pause:node0@1s+1s", `target "node0": want holder or nodeN`},
		{"pause:node@1s+1s", `target "node": want holder or nodeN`},
		{"pause:redis@1s+1s", `target "redis"`},
		{"pause:holder@1s+48h", "longer than 24h0m0s"},
		{"kill:holder", "missing @AT (want kill:TARGET@AT)"},
		{"kill:node-1@1s", `target "node-1"`},
		{"failover:etcd@1s", `target "etcd": only redis can be failed over`},
		{"restart:postgres@1s", `only redis can be restarted`},
		{"failover:redis", "missing @AT (want failover:redis@AT)"},
		{"partition:holder@1s", "missing +FOR"},
		{"skew:holder=+1s", `skew needs a node`},
		{"skew:node1", "missing =±D"},
		{"skew:node1=+-1s", "more than one sign"},
		{"skew:node1=0s", "must be positive"},
		{"latency:mysql=1ms", `server "mysql"`},
		{"latency:redis=-1ms", "negative"},
		{"latency:redis", "missing =D"},
	}
	for _, tt := range tests {
		_, err := lab.ParseChaos(tt.spec)
		require.Error(t, err, tt.spec)
		require.Contains(t, err.Error(), tt.want, tt.spec)
		require.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("chaos %q: ", tt.spec)), "the error quotes the spec: %v", err)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.spec)
	}
}

func FuzzParseChaos(f *testing.F) {
	for _, s := range []string{
		"pause:holder@3s+2s", "kill:node2@1s", "failover:redis@4s", "restart:redis@1s",
		"partition:node1@2s+3s", "skew:node2=-500ms", "latency:redis=20ms", "pause:node1@1h+1ns",
		"skew:node9999=+1s", ":", "@+=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		c, err := lab.ParseChaos(spec)
		if err != nil {
			require.Contains(t, err.Error(), "chaos ")
			return
		}
		// A parsed spec prints in a form that parses to the same chaos.
		again, err := lab.ParseChaos(c.String())
		require.NoError(t, err, "%q printed as %q", spec, c.String())
		require.Equal(t, c, again)
		require.GreaterOrEqual(t, c.At, time.Duration(0))
		require.GreaterOrEqual(t, c.For, time.Duration(0))
	})
}
