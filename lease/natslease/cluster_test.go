package natslease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/natslease"
)

// TestStreamLeaderKilled starts a private three-server cluster, holds two
// keys of an R3 bucket (one renewed by aegis.Hold, one granted once), and
// SIGKILLs the server that leads the bucket's stream. Until the unrenewed
// grant's TTL has passed, no other Locker is granted either key; a new
// leader takes over, the held lease keeps renewing, the unrenewed one
// expires on the new leader, and every later grant's token is greater.
// The killed server is started again at the end and rejoins.
func TestStreamLeaderKilled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cluster, err := servers.StartNATS(ctx, t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	newLocker := func() *natslease.Locker {
		nc, err := nats.Connect(strings.Join(cluster.URLs(), ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		l, err := natslease.New(js, nil)
		require.NoError(t, err)
		return l
	}
	holder, other := newLocker(), newLocker()
	held, once := testenv.Key(t), testenv.Key(t)

	// A stream's leader election takes 4 to 9 s after its leader dies
	// (nats-server's RAFT timings): a 6 s lease expired during one, its
	// renewal unanswered, and one of 15 s has 10 s left at a renewal: too
	// close on a loaded machine. The held lease renews at a third of its
	// TTL and retries until its deadline.
	const ttl = 30 * time.Second
	h, err := aegis.Hold(ctx, holder, held, ttl)
	require.NoError(t, err)
	defer h.Release(context.Background())
	granted := time.Now()
	lease, err := holder.TryAcquire(ctx, once, ttl)
	require.NoError(t, err)

	leader, err := cluster.StreamLeader(ctx, holder.Stream())
	require.NoError(t, err)
	killed := time.Now()
	require.NoError(t, leader.Kill())

	// No second holder before the unrenewed grant's TTL: the server's
	// expiry counts from its message's timestamp, after granted.
	var next *aegis.Lease
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for next == nil {
		for _, key := range []string{held, once} {
			l, err := other.TryAcquire(ctx, key, ttl)
			switch {
			case err == nil && key == held:
				t.Fatalf("the held key was granted to another Locker (token %d) after the stream's leader %s was killed", l.Token, leader)
			case err == nil:
				require.True(t, time.Now().After(granted.Add(ttl)),
					"the unrenewed key was granted again %s after its grant, before its TTL of %s", time.Since(granted), ttl)
				next = l
			case !errors.Is(err, aegis.ErrHeld): // the cluster electing: no answer for a while
				require.ErrorContains(t, err, "no answer from NATS", key)
			}
		}
		require.Less(t, time.Since(killed), 2*ttl, "the unrenewed key never expired after the leader was killed")
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the unrenewed key never expired after the leader was killed: %v", ctx.Err())
		}
	}
	require.Greater(t, next.Token, lease.Token, "a token after the leader change")

	newLeader, err := cluster.StreamLeader(ctx, holder.Stream())
	require.NoError(t, err)
	require.NotEqual(t, leader, newLeader)
	// Renewals that started after the kill have succeeded.
	require.Eventually(t, func() bool { return h.Err() != nil || h.Lease().Deadline.After(killed.Add(ttl+ttl/3)) },
		4*ttl, 10*time.Millisecond, "renewals after the leader was killed")
	require.NoError(t, h.Err(), "the held lease survives the loss of the stream's leader")
	_, err = other.TryAcquire(ctx, held, ttl)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, h.Release(ctx))
	after, err := other.TryAcquire(ctx, held, ttl)
	require.NoError(t, err)
	require.Greater(t, after.Token, next.Token, "tokens still grow")
	require.Greater(t, after.Token, h.Lease().Token)
	require.NoError(t, other.Release(ctx, after))
	require.NoError(t, other.Release(ctx, next))

	require.NoError(t, cluster.Heal(ctx), "the killed server starts again")
	require.Eventually(t, func() bool {
		_, err := cluster.StreamLeader(ctx, holder.Stream())
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the stream has a leader with the three servers up")
	third, err := other.TryAcquire(ctx, held, ttl)
	require.NoError(t, err)
	require.Greater(t, third.Token, after.Token)
	require.NoError(t, other.Release(ctx, third))
}
