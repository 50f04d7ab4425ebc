package runner_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// A run whose nodes exit on their configuration (an etcd TTL that is not
// whole seconds, which etcd refuses) ran nothing: its verdict is
// inconclusive, not ok, and says why in words with numbers.
func TestConfigExitIsInconclusive(t *testing.T) {
	t.Parallel()
	c := short("etcd", true)
	c.Nodes, c.TTL = 2, 1500*time.Millisecond
	s := session(t) // may wait for a test slot: the run's bound starts after it
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := s.Start(ctx, c)
	require.NoError(t, err, "the lab runs it: the nodes are the ones that refuse it")
	rep, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, lab.VerdictInconclusive, rep.Verdict, "reasons: %v; notes: %v", rep.Inconclusive, rep.Notes)
	require.Equal(t, lab.CheckOK, rep.Checker, "an empty history is linearizable: the checker alone would call it clean")
	require.Len(t, rep.Inconclusive, 2, "%v", rep.Inconclusive)
	require.Contains(t, rep.Inconclusive[0], "2 of 2 nodes exited on their configuration (node")
	require.Contains(t, rep.Inconclusive[0], "ttl 1.5s is not a whole number of seconds: etcd leases are whole seconds")
	require.Equal(t, fmt.Sprintf("%d of %d job ticks missed: 0 executed, fewer than 50%%", rep.Ticks, rep.Ticks), rep.Inconclusive[1])
}
