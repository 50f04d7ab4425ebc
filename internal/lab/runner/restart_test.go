package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/lab"
)

// A node a fault killed while it could not reach its store (a PostgreSQL
// crash; here, deterministically, a partition from PostgreSQL) exits
// before it is ready when the lab starts it again. The lab starts it
// again once its store is back, and it runs to the end of the run.
func TestKilledNodeRestartsOnceItsStoreIsBack(t *testing.T) {
	t.Parallel()
	c := short("pg-lease", true)
	c.Nodes, c.Duration = 2, 15*c.Tick
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := session(t).Start(ctx, c)
	require.NoError(t, err)
	for _, spec := range []string{"partition:node1@0s+2s/postgres", "kill:node1@0s"} {
		ch, err := lab.ParseChaos(spec)
		require.NoError(t, err)
		require.NoError(t, r.Inject(ctx, ch), spec) // the partition has begun before the kill
	}
	rep, err := r.Wait(ctx)
	require.NoError(t, err)

	var started, exitedEarly int
	finished := false
	for _, e := range rep.Events {
		if e.Node != 1 {
			continue
		}
		switch e.Kind {
		case lab.EventStarted:
			started++
			finished = false
		case lab.EventExited:
			if started >= 2 && !finished {
				exitedEarly++
			}
		case lab.EventFinished:
			finished = true
		}
	}
	require.Positive(t, exitedEarly, "node1, started again while cut from PostgreSQL, exited before it was ready: the case is exercised")
	require.True(t, finished, "node1's last process ran to the end of the run (started %d times); notes:\n%s", started, strings.Join(rep.Notes, "\n"))
}
