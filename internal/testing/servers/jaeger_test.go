package servers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// StartJaeger names what is wrong with its configuration before it starts
// anything.
func TestStartJaegerConfigErrors(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "jaeger")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	for _, tt := range []struct {
		cfg  JaegerConfig
		want string
	}{
		{JaegerConfig{}, "JaegerConfig.Binary is empty: build it with BuildJaeger"},
		{JaegerConfig{Binary: bin + "-missing"}, "JaegerConfig.Binary: stat " + bin + "-missing: no such file or directory"},
		{JaegerConfig{Binary: bin, OTLPPort: 4318}, "OTLPPort, QueryPort and QueryGRPCPort go together"},
	} {
		_, err := StartJaeger(t.Context(), t.TempDir(), &tt.cfg)
		require.ErrorContains(t, err, tt.want)
	}
}

// A build is found by the hash of the tool module's go.mod and go.sum: an
// unchanged module is not built again, a changed one is.
func TestJaegerBinaryFollowsTheModule(t *testing.T) {
	t.Parallel()
	module, cache := t.TempDir(), t.TempDir()
	_, err := JaegerBinary(module, cache)
	require.ErrorContains(t, err, "go.mod: no such file or directory (the tool module is tools/jaeger, from the repository's root)")
	require.NoError(t, os.WriteFile(filepath.Join(module, "go.mod"), []byte("module m\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(module, "go.sum"), []byte("a v1 h1:x\n"), 0o644))
	first, err := JaegerBinary(module, cache)
	require.NoError(t, err)
	require.Equal(t, cache, filepath.Dir(first))

	// A build already there is returned as is: the go command would fail
	// in this module, which has no Jaeger.
	require.NoError(t, os.WriteFile(first, []byte("built"), 0o755))
	got, err := BuildJaeger(t.Context(), module, cache, os.Stderr)
	require.NoError(t, err)
	require.Equal(t, first, got)

	require.NoError(t, os.WriteFile(filepath.Join(module, "go.sum"), []byte("a v2 h1:y\n"), 0o644))
	second, err := JaegerBinary(module, cache)
	require.NoError(t, err)
	require.NotEqual(t, first, second, "a new go.sum, a new build")
}
