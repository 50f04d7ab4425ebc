package servers

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestNATSClusterIsR3 starts a private three-server cluster and checks
// that it can hold what lease/natslease needs: a stream of three replicas
// with a leader and two current followers, whose leader StreamLeader
// names; after the leader is killed another server leads, and the killed
// one rejoins when healed.
func TestNATSClusterIsR3(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	n, err := StartNATS(ctx, t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Stop() })
	require.Len(t, n.Members(), 3)
	require.Regexp(t, `^nats://127\.0\.0\.1:\d+$`, n.URLs()[0])

	nc, err := nats.Connect(n.URLs()[0]+","+n.URLs()[1]+","+n.URLs()[2], nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "r3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	require.NoError(t, err)

	// current waits until the stream has a leader and two current
	// replicas, and returns the leader's name.
	current := func() string {
		t.Helper()
		var info *jetstream.StreamInfo
		require.Eventually(t, func() bool {
			s, err := js.Stream(ctx, "r3")
			if err != nil {
				return false
			}
			info = s.CachedInfo()
			if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					return false
				}
			}
			return true
		}, 30*time.Second, 20*time.Millisecond, "a leader and two current replicas: %+v", info)
		return info.Cluster.Leader
	}
	name := current()
	leader, err := n.StreamLeader(ctx, "r3")
	require.NoError(t, err)
	require.Equal(t, name, leader.Name())

	_, err = js.Publish(ctx, "r3.a", []byte("before"))
	require.NoError(t, err)
	require.NoError(t, leader.Kill())
	requireGone(t, leader)
	require.Eventually(t, func() bool {
		next, err := n.StreamLeader(ctx, "r3")
		return err == nil && next != leader
	}, 30*time.Second, 20*time.Millisecond, "no new leader of the stream after killing %s", leader)
	ack, err := js.Publish(ctx, "r3.a", []byte("after"))
	require.NoError(t, err, "the two others take writes")
	require.EqualValues(t, 2, ack.Sequence, "the write before the kill was kept")

	require.NoError(t, n.Heal(ctx))
	require.True(t, leader.Running())
	current() // the healed server catches up
	require.NoError(t, n.Stop())
	for _, m := range n.Members() {
		requireGone(t, m)
	}
}

// A build is found by the hash of the tool module's go.mod and go.sum, as
// Jaeger's; the shared one is whatever build the shared directory holds.
func TestNATSBinary(t *testing.T) {
	module, cache := t.TempDir(), t.TempDir()
	_, err := NATSBinary(module, cache)
	require.ErrorContains(t, err, "go.mod: no such file or directory (the tool module is tools/nats, from the repository's root)")
	require.NoError(t, os.WriteFile(filepath.Join(module, "go.mod"), []byte("module m\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(module, "go.sum"), []byte(""), 0o644))
	bin, err := NATSBinary(module, cache)
	require.NoError(t, err)
	require.Equal(t, cache, filepath.Dir(bin))

	scratch := t.TempDir()
	t.Setenv(EnvScratch, scratch)
	_, err = SharedNATSBinary()
	require.ErrorContains(t, err, "nats needs nats-server, which is not built")
	require.ErrorContains(t, err, "scripts/services start")
	_, err = StartNATS(testContext(t), t.TempDir(), nil)
	require.ErrorContains(t, err, "nats needs nats-server, which is not built")
	require.NoError(t, os.MkdirAll(filepath.Join(scratch, "nats-bin"), 0o755))
	built := filepath.Join(scratch, "nats-bin", "nats-server-0123456789abcdef")
	require.NoError(t, os.WriteFile(built, []byte("built"), 0o755))
	got, err := SharedNATSBinary()
	require.NoError(t, err)
	require.Equal(t, built, got)
}

// TestSetWithNATS: a Set asked for NATS starts its three servers, lists
// them among its processes and its environment, and stops them.
func TestSetWithNATS(t *testing.T) {
	t.Parallel()
	s, err := StartSet(testContext(t), t.TempDir(), &SetConfig{Kinds: []Kind{KindNATS}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	require.NotNil(t, s.NATS)
	require.Len(t, s.Procs(), 3)
	require.Equal(t, []string{EnvNATSURLs + "=" + s.NATS.URLs()[0] + "," + s.NATS.URLs()[1] + "," + s.NATS.URLs()[2]}, s.Env())
	st, err := Inspect(testContext(t), s.Dir, KindNATS)
	require.NoError(t, err)
	require.Len(t, st, 3)
	for _, x := range st {
		require.Equal(t, StateHealthy, x.State, x.Name)
	}
	require.NoError(t, s.Stop())
	for _, p := range s.Procs() {
		requireGone(t, p)
	}
}
