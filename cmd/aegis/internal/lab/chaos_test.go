package lab_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
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
		{"edit:nightly@2s=3s/500ms", lab.Chaos{Kind: lab.Edit, Target: "nightly", At: 2 * time.Second, Spec: "3s/500ms"}},
		{"edit:nightly@2s=3s/4s/no-keep-alive", lab.Chaos{Kind: lab.Edit, Target: "nightly", At: 2 * time.Second, Spec: "3s/4s/no-keep-alive"}},
		{"skew:node1=750ms", lab.Chaos{Kind: lab.Skew, Target: "node1", Offset: 750 * time.Millisecond}},
		{"latency:redis=20ms", lab.Chaos{Kind: lab.Latency, Target: "redis", Offset: 20 * time.Millisecond}},
		{"latency:pg=5ms", lab.Chaos{Kind: lab.Latency, Target: "postgres", Offset: 5 * time.Millisecond}},
		{"latency:zk=1s", lab.Chaos{Kind: lab.Latency, Target: "zookeeper", Offset: time.Second}},
		{"crash:postgres@3s", lab.Chaos{Kind: lab.Crash, Target: "postgres", At: 3 * time.Second}},
		{"crash:pg@0s", lab.Chaos{Kind: lab.Crash, Target: "postgres"}},
		{"kill:etcd@2s", lab.Chaos{Kind: lab.Kill, Target: "etcd", At: 2 * time.Second}},
		{"kill:zookeeper@1500ms", lab.Chaos{Kind: lab.Kill, Target: "zookeeper", At: 1500 * time.Millisecond}},
		{"kill:zk@1s", lab.Chaos{Kind: lab.Kill, Target: "zookeeper", At: time.Second}},
		{"kill:nats@3s", lab.Chaos{Kind: lab.Kill, Target: "nats", At: 3 * time.Second}},
		{"partition:holder@1s+2s/nats", lab.Chaos{Kind: lab.Partition, Target: "holder", At: time.Second, For: 2 * time.Second, Server: "nats"}},
		{"pause:writer@1s+2s", lab.Chaos{Kind: lab.Pause, Target: "writer", At: time.Second, For: 2 * time.Second}},
		{"kill:writer@1s", lab.Chaos{Kind: lab.Kill, Target: "writer", At: time.Second}},
		{"partition:writer@1s+1s", lab.Chaos{Kind: lab.Partition, Target: "writer", At: time.Second, For: time.Second}},
		{"partition:holder@1s+2s/etcd", lab.Chaos{Kind: lab.Partition, Target: "holder", At: time.Second, For: 2 * time.Second, Server: "etcd"}},
		{"partition:node2@0s+500ms/pg", lab.Chaos{Kind: lab.Partition, Target: "node2", For: 500 * time.Millisecond, Server: "postgres"}},
		{"partition:writer@1s+1s/zk", lab.Chaos{Kind: lab.Partition, Target: "writer", At: time.Second, For: time.Second, Server: "zookeeper"}},
		{"partition:node1@1s+1s/redis", lab.Chaos{Kind: lab.Partition, Target: "node1", At: time.Second, For: time.Second, Server: "redis"}},
		{"kill:committer@2s", lab.Chaos{Kind: lab.Kill, Target: "committer", At: 2 * time.Second}},
		{"pause:committer@1s+2s", lab.Chaos{Kind: lab.Pause, Target: "committer", At: time.Second, For: 2 * time.Second}},
		{"kill:leader@3s", lab.Chaos{Kind: lab.Kill, Target: "leader", At: 3 * time.Second}},
		{"pause:leader@1s+2s", lab.Chaos{Kind: lab.Pause, Target: "leader", At: time.Second, For: 2 * time.Second}},
		{"partition:leader@1s+1s/pg", lab.Chaos{Kind: lab.Partition, Target: "leader", At: time.Second, For: time.Second, Server: "postgres"}},
		{"promote:standby@4s", lab.Chaos{Kind: lab.Promote, Target: "standby", At: 4 * time.Second}},
		{"promote:standby@0s", lab.Chaos{Kind: lab.Promote, Target: "standby"}},
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
		{"pause:node0@1s+1s", `target "node0": want holder, writer, committer, leader or nodeN`},
		{"pause:node@1s+1s", `target "node": want holder, writer, committer, leader or nodeN`},
		{"pause:redis@1s+1s", `target "redis"`},
		{"pause:holder@1s+48h", "longer than 24h0m0s"},
		{"edit:nightly@1s=3s/soon", `SPEC "3s/soon": a schedule to add is EVERY/WORK`},
		{"edit:nightly@1s=3s/1s/keep", `SPEC "3s/1s/keep"`},
		{"kill:holder", "missing @AT (want kill:TARGET@AT)"},
		{"kill:node-1@1s", `target "node-1": want holder, writer, committer, leader, nodeN (N from 1), etcd, zookeeper or nats`},
		{"kill:redis@1s", `target "redis": of the servers, only etcd, zookeeper and nats can be killed (redis's fault is failover:redis@AT or restart:redis@AT)`},
		{"kill:postgres@1s", `(postgres's fault is crash:postgres@AT or promote:standby@AT)`},
		{"promote:standby", "missing @AT (want promote:standby@AT)"},
		{"promote:postgres@1s", `target "postgres": only the hot standby can be promoted (want promote:standby@AT)`},
		{"promote:standby@-1s", "AT -1s is negative"},
		{"promote:standby@25h", "longer than 24h0m0s"},
		{"promote:@1s", `target "": only the hot standby`},
		{"kill:etcd", "missing @AT (want kill:TARGET@AT)"},
		{"kill:etcd@-1s", "AT -1s is negative"},
		{"crash:postgres", "missing @AT (want crash:postgres@AT)"},
		{"crash:redis@1s", `target "redis": only postgres can be crashed (redis's fault is failover:redis@AT or restart:redis@AT)`},
		{"crash:etcd@1s", `(etcd's fault is kill:etcd@AT)`},
		{"crash:holder@1s", `target "holder": only postgres can be crashed (want crash:postgres@AT)`},
		{"crash:postgres@later", `AT "later" is not a duration`},
		{"restart:zk@1s", `only redis can be restarted (zookeeper's fault is kill:zookeeper@AT)`},
		{"partition:holder@1s+1s/mysql", `server "mysql": want postgres, redis, etcd, zookeeper or nats`},
		{"partition:holder@1s+1s/", `server "": want postgres`},
		{"partition:holder@1s+/etcd", "FOR is empty"},
		{"partition:holder@1s/etcd", "missing +FOR (want partition:TARGET@AT+FOR[/SERVER])"},
		{"partition:etcd@1s+1s", `target "etcd": want holder, writer, committer, leader or nodeN`},
		{"pause:holder@1s+1s/etcd", "only a partition is to one server"},
		{"skew:writer=+1s", `target "writer": skew needs a node`},
		{"failover:etcd@1s", `target "etcd": only redis can be failed over`},
		{"restart:postgres@1s", `only redis can be restarted`},
		{"failover:redis", "missing @AT (want failover:redis@AT)"},
		{"partition:holder@1s", "missing +FOR"},
		{"skew:holder=+1s", `skew needs a node`},
		{"skew:leader=+1s", `target "leader": skew needs a node (nodeN), the leader changes during a run`},
		{"skew:node1", "missing =±D"},
		{"skew:node1=+-1s", "more than one sign"},
		{"skew:node1=0s", "must be positive"},
		{"latency:mysql=1ms", `server "mysql"`},
		{"latency:redis=-1ms", "negative"},
		{"latency:redis", "missing =D"},
		{"latency:postgres=1h", "the delay D=1h is more than 1m0s, the most a round trip is slowed"},
		{"latency:postgres=61s", "the delay D=61s is more than 1m0s"},
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
		"skew:node9999=+1s", ":", "@+=", "crash:postgres@1s", "kill:etcd@2s", "kill:zk@0s",
		"pause:writer@1s+1s", "partition:holder@1s+2s/etcd", "partition:node1@1s+1s/pg", "partition:x@1s+1s//",
		"promote:standby@4s", "promote:standby@", "promote:primary@1s",
		"kill:nats@3s", "partition:node2@1s+2s/nats", "latency:nats=5ms",
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

// A fault that reaches a server is refused for a strategy whose nodes do
// not use it, with an error that names the strategy and its servers.
func TestChaosNeedsTheStrategysServers(t *testing.T) {
	t.Parallel()
	tests := []struct{ strategy, spec, want string }{
		{"pg-lease", "kill:etcd@1s", "--chaos kill:etcd@1s: pg-lease does not use etcd: it uses only the store of record (postgres)"},
		{"etcd", "kill:zookeeper@1s", "--chaos kill:zookeeper@1s: etcd does not use zookeeper: it uses etcd besides the store of record (postgres)"},
		{"redlock", "kill:etcd@1s", "redlock does not use etcd: it uses redis besides"},
		{"etcd", "partition:holder@1s+1s/redis", "--chaos partition:holder@1s+1s/redis: etcd does not use redis"},
		{"none", "partition:writer@1s+1s/zookeeper", "none does not use zookeeper: it uses only the store of record (postgres)"},
		{"sqlite", "partition:holder@1s+1s/postgres", "sqlite has no network to partition"},
		{"pg-lease", "pause:writer@1s+1s", ""},
		{"pg-unique", "kill:writer@1s", ""},
		{"none", "crash:postgres@1s", ""},
		{"redis", "crash:postgres@1s", ""},
		{"etcd", "kill:etcd@1s", ""},
		{"zookeeper", "kill:zookeeper@1s", ""},
		{"nats", "kill:nats@1s", ""},
		{"etcd", "kill:nats@1s", "--chaos kill:nats@1s: etcd does not use nats: it uses etcd besides the store of record (postgres)"},
		{"nats", "partition:holder@1s+1s/nats", ""},
		{"nats", "latency:nats=20ms", ""},
		{"etcd", "partition:holder@1s+1s/etcd", ""},
		{"redis", "partition:writer@1s+1s/postgres", ""},
		{"queue", "partition:node1@1s+1s/postgres", ""},
		{"queue", "kill:leader@1s", ""},
		{"pg-unique", "kill:committer@1s", ""},
		{"pg-lease", "kill:leader@1s", "--chaos kill:leader@1s: pg-lease has no leader: the leader target is for leader mode (queue), not lease mode"},
		{"pg-unique", "pause:leader@1s+1s", "pg-unique has no leader"},
	}
	for _, tt := range tests {
		ch, err := lab.ParseChaos(tt.spec)
		require.NoError(t, err, tt.spec)
		c := lab.DefaultConfig()
		c.Strategy, c.Chaos = tt.strategy, []lab.Chaos{ch}
		err = c.Validate()
		if tt.want == "" {
			require.NoError(t, err, "%s with %s", tt.spec, tt.strategy)
			continue
		}
		require.ErrorContains(t, err, tt.want, "%s with %s", tt.spec, tt.strategy)
		require.ErrorIs(t, err, aegis.ErrInvalid)
	}
}
