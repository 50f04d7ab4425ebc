package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	require.Equal(t, string(want), got)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "help")
	require.Equal(t, 0, code)
	require.Empty(t, stderr)
	golden(t, "help.golden", stdout)

	code, stdout, _ = run(t, "help", "services")
	require.Equal(t, 0, code)
	golden(t, "help-services.golden", stdout)

	code, stdout, _ = run(t, "help", "lab")
	require.Equal(t, 0, code)
	golden(t, "help-lab.golden", stdout)
}

func TestServicesEnv(t *testing.T) {
	t.Parallel()
	// A scratch directory without a Jaeger: its lines are printed only
	// while it runs (make test-jaeger's).
	empty := t.TempDir()
	code, stdout, stderr := run(t, "services", "env", "--dir", empty)
	require.Equal(t, 0, code, stderr)
	golden(t, "services-env.golden", stdout)

	code, stdout, stderr = run(t, "services", "env", "--dir", empty, "jaeger")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout, "no Jaeger runs")

	code, stdout, _ = run(t, "services", "env", "zk")
	require.Equal(t, 0, code)
	require.Equal(t, "export AEGIS_ZK_SERVERS='127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183'\n", stdout)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		code       int
		wantStderr string
	}{
		{nil, 2, "aegis <command>"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"help", "nope"}, 2, `unknown command "nope"`},
		{[]string{"services"}, 2, "missing action"},
		{[]string{"services", "-x"}, 2, "flag provided but not defined: -x"},
		{[]string{"services", "bogus"}, 2, `unknown action "bogus"`},
		{[]string{"services", "start", "mysql"}, 2, `unknown server "mysql"`},
		{[]string{"services", "install"}, 2, "scripts/services install"},
		// The test runs in its package's directory, not the repository's root.
		{[]string{"services", "start", "jaeger"}, 2, "tools/jaeger/go.mod: no such file or directory (the tool module is tools/jaeger, from the repository's root): run aegis services from the repository's root"},
		{[]string{"services", "-h"}, 0, "usage: aegis services"},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, tt.args...)
		require.Equal(t, tt.code, code, "%q: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.wantStderr, "%q", tt.args)
	}
}

func TestServicesStatusAndStopOfEmptyDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, stdout, stderr := run(t, "services", "status", "-dir", dir, "redis", "etcd")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "redis")
	require.Contains(t, stdout, "not running")
	require.Contains(t, stderr, "not healthy: redis, etcd")

	code, stdout, stderr = run(t, "services", "stop", "-dir", dir)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)
}
