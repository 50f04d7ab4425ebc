package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// A node a fault killed while it could not reach its store (a PostgreSQL
// crash; here, deterministically, a partition from PostgreSQL) exits
// before it is ready when the lab starts it again. The lab starts it
// again once its store is back, and it runs to the end of the run.
func TestKilledNodeRestartsOnceItsStoreIsBack(t *testing.T) {
	t.Parallel()
	c := short("pg-lease", true)
	c.Nodes, c.Duration = 2, 15*c.Tick
	s := session(t) // may wait for a test slot: the run's bound starts after it
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := s.Start(ctx, c)
	require.NoError(t, err)
	events, unsubscribe := r.Subscribe(0)
	defer unsubscribe()
	inject := func(spec string) error {
		ch, err := lab.ParseChaos(spec)
		require.NoError(t, err)
		return r.Inject(ctx, ch)
	}
	require.NoError(t, inject("partition:node1@0s+3s/postgres"))
	require.NoError(t, inject("kill:node1@0s")) // the partition has begun before the kill
	// Once its second process has exited, node1 is down until the lab
	// starts it again: a kill of it now has nothing more to do, and
	// leaves the run as conclusive as it was (either error: the lab may
	// already be starting it again).
	spawned := 0
	nextEvent(t, events, "node1's second process exiting", func(e lab.Event) bool {
		if e.Node == 1 && e.Kind == lab.EventStarted {
			spawned++
		}
		return e.Node == 1 && e.Kind == lab.EventExited && spawned == 2
	})
	if err := inject("kill:node1@0s"); err != nil {
		require.Regexp(t, `node1 (is being killed and restarted by another fault already|is not running): nothing more to do to it`, err.Error())
	}
	unsubscribe()
	rep, err := r.Wait(ctx)
	require.NoError(t, err)
	for _, why := range rep.Inconclusive {
		require.NotContains(t, why, "a fault did not happen", "a kill of a node that is down is done")
	}

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

// A kill of a node that another kill's restart has started again, and
// that is not ready yet, has nothing more to do: the node is down until
// that restart ends. Taken as a kill, it killed the new process and
// started the node again while the first restart, its process gone,
// started it again too: two processes of one node, the older left
// running past the run's end, its output read for ever (the node reader
// goleak found after aegis lab campaign's tests).
func TestKillOfANodeBeingRestarted(t *testing.T) {
	t.Parallel()
	c := short("pg-lease", true)
	c.Nodes, c.Duration = 2, 50*c.Tick // stopped by the test
	s := session(t, restartHangs+"=1") // may wait for a test slot: the run's bound starts after it
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := s.Start(ctx, c)
	require.NoError(t, err)
	events, unsubscribe := r.Subscribe(0)
	defer unsubscribe()
	inject := func(spec string) error {
		ch, err := lab.ParseChaos(spec)
		require.NoError(t, err)
		return r.Inject(ctx, ch)
	}
	require.NoError(t, inject("kill:node1@0s"))
	nextEvent(t, events, "node1's second process", func(e lab.Event) bool {
		return e.Node == 1 && e.Kind == lab.EventStarted && strings.HasSuffix(e.Detail, ", incarnation 2")
	})
	err = inject("kill:node1@0s") // the second process hangs before it is ready
	unsubscribe()
	r.Stop()
	rep, werr := r.Wait(ctx)
	require.NoError(t, werr)
	started, exited := 0, 0
	for _, e := range rep.Events {
		switch {
		case e.Node != 1:
		case e.Kind == lab.EventStarted:
			started++
		case e.Kind == lab.EventExited:
			exited++
		}
	}
	require.Equal(t, 2, started, "node1's processes: the first and the restart's")
	require.Equal(t, started, exited, "every process of node1 exited by the run's end")
	require.ErrorContains(t, err, "node1 is being killed and restarted by another fault already: nothing more to do to it")
}
