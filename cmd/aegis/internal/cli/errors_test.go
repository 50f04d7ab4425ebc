package cli

import (
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// closedPort returns a loopback address nothing listens on: port 1 (a
// privileged port no test server takes, where a port just freed by a
// listener could be taken by another test's server).
func closedPort(t *testing.T) string {
	t.Helper()
	const addr = "127.0.0.1:1"
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
	}
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "something listens on %s", addr)
	return addr
}

// secret is the password of the URLs below: no output may show it.
const secret = "s3cretpw"

// The commands that connect to PostgreSQL, given a URL with a password
// whose server is down.
func postgresCommands(url string) [][]string {
	return [][]string{
		{"inspect", "--postgres-url", url},
		{"inspect", "--postgres-url", url, "stuck"},
		{"bench", "lease", "--backend", "postgres", "--duration", "1s", "--postgres-url", url},
		{"bench", "queue", "--jobs", "10", "--workers", "1", "--postgres-url", url},
		{"lab", "run", "--strategy", "pg-lease", "--duration", "1s", "--postgres-url", url},
		{"lab", "run", "--strategy", "none", "--duration", "1s", "--json", "--postgres-url", url},
	}
}

// A server that cannot be reached is named (host:port) with the cause, once
// prefixed, without the URL or its password.
func TestConnectErrorNamesServerAndCause(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	url := fmt.Sprintf("postgres://aegis:%s@%s/x?sslmode=disable", secret, addr)
	for _, args := range postgresCommands(url) {
		code, stdout, stderr := run(t, args...)
		out := stdout + stderr
		require.Equal(t, 1, code, "%v: %s", args, out)
		require.Contains(t, stderr, "PostgreSQL at "+addr+": connection refused", "%v", args)
		require.NotContains(t, out, secret, "%v", args)
		require.NotContains(t, out, "aegis:", "%v: the URL's user and password are not shown", args)
		name := "aegis " + args[0] + ": "
		require.True(t, strings.HasPrefix(stderr, name) || strings.Contains(stderr, "\n"+name), "%v: %s", args, stderr)
		require.NotContains(t, stderr, name+args[0]+":", "%v: the command's name once", args)
	}
}

// A URL that does not parse is not echoed either (pgx redacts its password
// only on a best-effort basis).
func TestUnparsableURLNotShown(t *testing.T) {
	t.Parallel()
	url := "postgres://aegis:" + secret + "%zz@127.0.0.1:1/x"
	for _, args := range postgresCommands(url) {
		code, stdout, stderr := run(t, args...)
		out := stdout + stderr
		require.NotEqual(t, 0, code, "%v: %s", args, out)
		require.NotContains(t, out, secret, "%v", args)
		require.Contains(t, stderr, "does not parse", "%v", args)
	}
}

// Help shows no default of a flag whose variable holds a password. Not
// parallel: it sets AEGIS_POSTGRES_URL.
func TestHelpHidesTheURL(t *testing.T) {
	t.Setenv("AEGIS_POSTGRES_URL", "postgres://aegis:"+secret+"@127.0.0.1:1/x")
	for _, args := range [][]string{{"inspect", "-h"}, {"bench", "lease", "-h"}, {"bench", "queue", "-h"}, {"lab", "run", "-h"}, {"lab", "-h"}, {"help", "lab"}} {
		code, stdout, stderr := run(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.NotContains(t, stdout+stderr, secret, "%v", args)
	}
	code, stdout, stderr := run(t, "inspect")
	require.Equal(t, 1, code)
	require.NotContains(t, stdout+stderr, secret)
	require.Contains(t, stderr, "127.0.0.1:1: connection refused")
}

// The aegis binary does not link package testing (it came in through a
// benchmark helper).
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to list the binary's dependencies")
	out, err := exec.CommandContext(t.Context(), gobin, "list", "-deps", "github.com/aegislab/aegis/cmd/aegis").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/aegislab/aegis/cmd/aegis/internal/cli", "the listing is the binary's")
	require.NotContains(t, deps, "testing")
}

// aegis bench lease on servers that are down names them and the cause, at
// once (etcd and ZooKeeper used to wait out every call's retries, go-redis
// to log each one).
func TestBenchLeaseServersDown(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	for _, args := range [][]string{
		{"--backend", "redis", "--redis-addrs", addr},
		{"--backend", "redlock", "--redis-addrs", addr + "," + addr + "," + addr},
		{"--backend", "etcd", "--etcd-endpoints", "http://" + addr},
		{"--backend", "zookeeper", "--zk-servers", addr},
	} {
		code, stdout, stderr := run(t, append([]string{"bench", "lease", "--duration", "1s"}, args...)...)
		require.Equal(t, 1, code, "%v: %s%s", args, stdout, stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "%v: one line: %s", args, stderr)
		require.Contains(t, stderr, addr+": connection refused", "%v", args)
	}
}

// A server that refuses the login says so, with the server's reason.
func TestConnectErrorAuthFailed(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.PostgresURL(t))
	require.NoError(t, err)
	u.User = url.UserPassword("aegis_no_such_role", secret)
	code, stdout, stderr := run(t, "inspect", "--postgres-url", u.String())
	require.Equal(t, 1, code, "%s%s", stdout, stderr)
	require.Contains(t, stderr, "PostgreSQL at "+u.Host+`: authentication failed: role "aegis_no_such_role" does not exist (SQLSTATE 28000)`)
	require.NotContains(t, stdout+stderr, secret)
}
