package lab_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/servers"
	"github.com/aegislab/aegis/internal/testenv"
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
	holder := nextEvent(t, events, "a node in the critical section", func(e lab.Event) bool { return e.Kind == lab.EventEntered }).Node
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

	var chaos, healed bool
	drain(t, events, func(e lab.Event) {
		chaos = chaos || e.Kind == lab.EventChaos
		healed = healed || e.Kind == lab.EventHealed
	})
	require.True(t, chaos)
	require.True(t, healed)
	rep, err := r.Wait(t.Context())
	require.NoError(t, err)
	requireConsistent(t, r.ID, rep)
	requireSafe(t, rep)
	requireTakeoverOutcome(t, rep, true) // the resumed holder's write is refused once another node entered its tick
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
	nextEvent(t, events, "an execution", func(e lab.Event) bool { return e.Kind == lab.EventExecuted })
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
		require.False(t, testenv.PidAlive(n.Pid), "node%d (pid %d) still runs", n.Node, n.Pid)
	}
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
		ctx, cancel := context.WithTimeout(t.Context(), within)
		rep, err := r.Wait(ctx)
		cancel()
		require.NoError(t, err, "the run did not end")
		require.Equal(t, 4, rep.Executions)
	}
	st, err := servers.Inspect(t.Context(), dir)
	require.NoError(t, err)
	require.Len(t, st, 1, "one PostgreSQL, started once: %+v", st)
	require.Equal(t, servers.StateHealthy, st[0].State)
	pid := st[0].Pid
	require.True(t, testenv.PidAlive(pid))
	require.NoError(t, s.Close())
	require.False(t, testenv.PidAlive(pid), "PostgreSQL (pid %d) still runs after Close", pid)
	closed = true
	st, err = servers.Inspect(t.Context(), dir)
	require.NoError(t, err)
	for _, x := range st {
		require.Equal(t, servers.StateDead, x.State, "%s still runs after Close", x.Name)
	}
}

// A clock stepped forward (skew injected during the run, as NTP does)
// lets a node that waits behind a live optimistic claim see it expired and
// steal it: unfenced, the paused claimer's late write lands too.
func TestSkewStepStealsOptimisticClaim(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(map[bool]string{false: "unfenced", true: "fenced"}[fence], func(t *testing.T) {
			t.Parallel()
			c := short("optimistic", fence, "pause:holder@300ms+1500ms") // shorter than the TTL: nobody steals…
			c.TTL, c.Tick, c.Duration = 2*time.Second, 300*time.Millisecond, 4*300*time.Millisecond
			r, err := session(t).Start(t.Context(), c)
			require.NoError(t, err)
			events, cancel := r.Subscribe(0)
			defer cancel()
			paused := nextEvent(t, events, "the pause", func(e lab.Event) bool {
				return e.Kind == lab.EventChaos && strings.Contains(e.Detail, "paused with SIGSTOP")
			}).Node
			require.NotZero(t, paused)
			thief := paused%3 + 1
			// …until a clock jumps ahead: 3 s is past the claim's 2 s TTL and
			// within the tick's 4.36 s window, so the thief tries the tick
			// whether or not it had started it when its clock jumped.
			step, err := lab.ParseChaos(fmt.Sprintf("skew:node%d=+3s", thief))
			require.NoError(t, err)
			require.NoError(t, r.Inject(t.Context(), step))
			ctx, cancel := context.WithTimeout(t.Context(), within)
			defer cancel()
			rep, err := r.Wait(ctx)
			require.NoError(t, err)
			var b strings.Builder
			_ = rep.WriteSummary(&b)
			t.Log("\n" + b.String())
			requireConsistent(t, r.ID, rep)
			if fence {
				requireSafe(t, rep)
			}
			// Whether the thief entered the tick before the paused claimer
			// resumed is a race; once it did, the outcome is forced.
			if to, ok := findTakeover(rep); ok {
				require.Equal(t, thief, to.successor.Node, "node%d stole node%d's live claim", thief, paused)
			}
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// Close stops the runs still going before it stops the servers.
func TestCloseStopsRuns(t *testing.T) {
	t.Parallel()
	s := session(t)
	c := short("none", false)
	c.Duration = 100 * c.Tick
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	select {
	case <-r.Done():
	default:
		t.Fatal("the run still goes after Close")
	}
	for _, n := range r.Status().Nodes {
		require.False(t, testenv.PidAlive(n.Pid), "node%d (pid %d) still runs", n.Node, n.Pid)
	}
	_, err = s.Start(t.Context(), c)
	require.ErrorContains(t, err, "session closed")
}
