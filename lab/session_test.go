package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/servers"
	"github.com/aegislab/aegis/lab"
)

// The dashboard's API: a run streams its events live, reports its status,
// and takes faults on demand.
func TestRunAPI(t *testing.T) {
	t.Parallel()
	s := session(t)
	c := short("pg-lease", true)
	c.Duration = 12 * c.Tick
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	events, cancel := r.Subscribe(0)
	defer cancel()

	// Wait until a node is inside the critical section, then pause it past
	// its TTL from outside, as the dashboard's button does.
	var holder int
	for e := range events {
		if e.Kind == lab.EventEntered {
			holder = e.Node
			break
		}
	}
	require.NotZero(t, holder)
	pause, err := lab.ParseChaos("pause:holder@0s+1200ms")
	require.NoError(t, err)
	require.NoError(t, r.Inject(t.Context(), pause))
	st := r.Status()
	require.Equal(t, r.ID, st.Run)
	require.Len(t, st.Nodes, 3)
	paused := 0
	for _, n := range st.Nodes {
		if n.State == "paused" {
			paused++
			require.NotZero(t, n.Pid)
		}
	}
	require.Equal(t, 1, paused, "%+v", st)

	var stale, chaos, healed bool
	for e := range events { // until the run ends and the channel closes
		stale = stale || e.Kind == lab.EventStale
		chaos = chaos || e.Kind == lab.EventChaos
		healed = healed || e.Kind == lab.EventHealed
	}
	require.True(t, chaos)
	require.True(t, healed)
	require.True(t, stale, "the resumed holder's write was refused")
	rep, err := r.Wait(t.Context())
	require.NoError(t, err)
	require.Zero(t, rep.DuplicatesApplied)
	require.Equal(t, len(rep.Events), len(r.Events()))
	require.True(t, r.Status().Done)
	require.ErrorContains(t, r.Inject(t.Context(), pause), "the run has ended")
}

// A run stopped early reports what happened until then, and its nodes are
// gone.
func TestRunStop(t *testing.T) {
	t.Parallel()
	s := session(t)
	c := short("none", false)
	c.Duration = 100 * c.Tick
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	events, cancel := r.Subscribe(0)
	defer cancel()
	for e := range events {
		if e.Kind == lab.EventExecuted {
			break
		}
	}
	r.Stop()
	ctx, done := context.WithTimeout(t.Context(), 30*time.Second)
	defer done()
	rep, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Less(t, rep.Executions, 3*100)
	require.Less(t, rep.Ticks, 100, "the counts cover the ticks that fired")
	require.LessOrEqual(t, rep.MissedTicks, rep.Ticks, "ticks that never fired are not missed")
	require.Contains(t, strings.Join(rep.Notes, "\n"), "stopped early")
	for _, n := range r.Status().Nodes {
		require.False(t, pidAlive(n.Pid), "node%d (pid %d) still runs", n.Node, n.Pid)
	}
}

func pidAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie is gone for our purposes.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}

// With no servers given, the session starts its own (PostgreSQL here,
// the store of record), reuses them across runs, and stops them on Close.
func TestSessionStartsAndStopsItsServers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := lab.NewSession(lab.Options{Dir: dir, NodeEnv: []string{nodeEnv}})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	c := short("none", false)
	c.Duration, c.Nodes = 2*c.Tick, 2
	for range 2 { // the second run reuses the server
		r, err := s.Start(t.Context(), c)
		require.NoError(t, err)
		rep, err := r.Wait(t.Context())
		require.NoError(t, err)
		require.Equal(t, 4, rep.Executions)
	}
	st, err := servers.Inspect(t.Context(), dir)
	require.NoError(t, err)
	require.Len(t, st, 1, "one PostgreSQL, started once: %+v", st)
	require.Equal(t, servers.StateHealthy, st[0].State)
	pid := st[0].Pid
	require.True(t, pidAlive(pid))
	require.NoError(t, s.Close())
	require.False(t, pidAlive(pid), "PostgreSQL (pid %d) still runs after Close", pid)
	closed = true
	st, err = servers.Inspect(t.Context(), dir)
	require.NoError(t, err)
	for _, x := range st {
		require.Equal(t, servers.StateDead, x.State, "%s still runs after Close", x.Name)
	}
}
