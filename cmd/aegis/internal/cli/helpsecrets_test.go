package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// TestHelpHidesSecrets sets every server variable to an address that
// carries a password and asks every command and action for its help: no
// help or usage text shows a password, and the flags that default to an
// address list show which servers, their passwords masked.
//
// Not parallel: it sets the environment the flags read their defaults from.
func TestHelpHidesSecrets(t *testing.T) {
	t.Setenv(servers.EnvPostgresURL, "postgres://aegis:pg-s3cret@db.example:5432/aegis?password=pg-s3cret")
	t.Setenv(servers.EnvRedisAddrs, "redis://:redis-s3cret@127.0.0.1:6379,127.0.0.1:6380")
	t.Setenv(servers.EnvEtcdEndpoints, "http://root:etcd-s3cret@127.0.0.1:2379,127.0.0.1:2381")
	t.Setenv(servers.EnvZKServers, "digest:zk-s3cret@127.0.0.1:2181")
	t.Setenv(servers.EnvNATSURLs, "nats://app:nats-s3cret@127.0.0.1:4222,nats://127.0.0.1:4223")
	t.Setenv("AEGIS_SQLITE_PATH", "/tmp/leases.db")
	t.Setenv("AEGIS_CONSOLE_PASSWORD", "console-s3cret")

	shown := map[string]bool{}
	for _, args := range [][]string{
		{"help"},
		{"bench", "-h"}, {"bench", "lease", "-h"}, {"bench", "queue", "-h"},
		{"console", "-h"}, {"inspect", "-h"}, {"node", "-h"},
		{"lab", "-h"}, {"lab", "--addr", "127.0.0.1:7070", "-h"}, {"lab", "run", "-h"}, {"lab", "campaign", "-h"},
		{"schedule", "-h"}, {"schedule", "list", "-h"}, {"schedule", "put", "-h"}, {"schedule", "pause", "-h"},
		{"schedule", "resume", "-h"}, {"schedule", "run-now", "-h"}, {"schedule", "rm", "-h"}, {"schedule", "runs", "-h"},
		{"services", "-h"}, {"services", "start", "-h"},
	} {
		_, stdout, stderr := run(t, args...)
		out := stdout + stderr
		require.NotContains(t, out, "s3cret", "aegis %s", strings.Join(args, " "))
		if strings.Contains(out, "http://root:xxxxx@127.0.0.1:2379,127.0.0.1:2381") {
			shown[strings.Join(args, " ")+" etcd"] = true
		}
		if strings.Contains(out, "redis://:xxxxx@127.0.0.1:6379,127.0.0.1:6380") {
			shown[strings.Join(args, " ")+" redis"] = true
		}
		if strings.Contains(out, "digest:xxxxx@127.0.0.1:2181") {
			shown[strings.Join(args, " ")+" zk"] = true
		}
		if strings.Contains(out, "nats://app:xxxxx@127.0.0.1:4222,nats://127.0.0.1:4223") {
			shown[strings.Join(args, " ")+" nats"] = true
		}
	}
	require.True(t, shown["bench lease -h nats"], "aegis bench lease -h shows the NATS servers of its default, the password masked")
	for _, cmd := range []string{"bench lease -h", "lab --addr 127.0.0.1:7070 -h", "lab run -h", "lab campaign -h"} {
		for _, kind := range []string{"etcd", "redis", "zk"} {
			require.True(t, shown[cmd+" "+kind], "aegis %s shows the %s servers of its default, the password masked", cmd, kind)
		}
	}
}

func TestMasked(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                                   "",
		"127.0.0.1:6379,127.0.0.1:6380":      "127.0.0.1:6379,127.0.0.1:6380",
		"http://127.0.0.1:2379":              "http://127.0.0.1:2379",
		"redis://:pw@h:1":                    "redis://:xxxxx@h:1",
		"http://user:pw@h:1,h:2":             "http://user:xxxxx@h:1,h:2",
		"user:p@ss:w@h:1":                    "user:xxxxx@h:1",
		"token@h:1":                          "xxxxx@h:1",
		"http://h:1/?password=pw&db=0":       "http://h:1/?db=0&password=xxxxx",
		"http://u:pw@h:1?password=pw&x=%zz":  "http://u:xxxxx@h:1?…",
		"digest:pw@127.0.0.1:2181,h:2,u@h:3": "digest:xxxxx@127.0.0.1:2181,h:2,xxxxx@h:3",
	} {
		require.Equal(t, want, masked(in), in)
	}
}
