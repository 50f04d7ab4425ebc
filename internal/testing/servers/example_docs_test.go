package servers_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// TestExamplePrivateRedis is docs/servers.md's private servers, as printed
// there, then a check that the crashed primary came back empty on its port.
func TestExamplePrivateRedis(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, err := servers.StartRedis(ctx, filepath.Join(t.TempDir(), "redis-1"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	replica, err := servers.StartRedis(ctx, filepath.Join(t.TempDir(), "redis-2"),
		&servers.RedisConfig{ReplicaOf: primary.Addr()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Stop() })
	_, err = servers.RedisCommand(ctx, primary.Addr(), "SET", "k", "v")
	require.NoError(t, err)
	require.Eventually(t, func() bool { // synced: the primary's fork for the sync has exited
		info, err := servers.RedisCommand(ctx, replica.Addr(), "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 10*time.Millisecond, "the replica never synced")

	require.NoError(t, primary.Kill())     // crash: SIGKILL to its process group
	require.NoError(t, primary.Start(ctx)) // the same port, empty data (no persistence)

	v, err := servers.RedisCommand(ctx, primary.Addr(), "GET", "k")
	require.NoError(t, err)
	require.Empty(t, v, "the restarted primary lost what it held")
	role, err := servers.RedisCommand(ctx, replica.Addr(), "ROLE")
	require.NoError(t, err)
	require.Contains(t, role, "slave")
}
