package runner_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
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
	rep, audit := report(t, s, r, rep)
	requireLabelKept(t, rep, audit)
	requireFaultOutcome(t, rep, audit, "paused with SIGSTOP", true) // the resumed holder's write is refused once a successor read
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
	// A fault asked for once the run is stopping is refused: added while
	// the supervisor waits for the faults, it would restart a node after
	// the nodes were stopped, and leave it running.
	kill, err := lab.ParseChaos("kill:node1@0s")
	require.NoError(t, err)
	require.ErrorContains(t, r.Inject(t.Context(), kill), "the run has ended")
	ctx, done := context.WithTimeout(t.Context(), 30*time.Second)
	defer done()
	rep, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Contains(t, strings.Join(rep.Notes, "\n"), "stopped early")
	rep, _ = report(t, s, r, rep)
	// A hundred ticks of the default catalog are 100 + 50 + 33 or 34 job
	// ticks; the run was stopped after its first execution.
	require.Less(t, rep.Ticks, 100, "the counts cover the ticks that fired")
	require.Less(t, rep.Executions, 3*100)
	require.LessOrEqual(t, rep.MissedTicks, rep.Ticks, "ticks that never fired are not missed")
	// The note's claim: the counts cover the ticks that fired (one more at
	// the edge: a node may run a tick as the lab fires it). Stopped, the
	// nodes run no later tick.
	var fired, of int
	for _, n := range rep.Notes {
		if _, err := fmt.Sscanf(n, "stopped early: %d of %d ticks fired", &fired, &of); err == nil {
			break
		}
	}
	require.Equal(t, 100, of, "the note says how many ticks fired: %q", rep.Notes)
	for _, e := range rep.Events {
		if e.Kind == lab.EventEntered {
			require.LessOrEqual(t, e.Tick, fired+1, "node%d entered %s tick %d at %.3fs, after the run was stopped at tick %d", e.Node, e.Job, e.Tick, e.T, fired)
		}
	}
	for _, n := range r.Status().Nodes {
		require.False(t, testenv.PidAlive(n.Pid), "node%d (pid %d) still runs", n.Node, n.Pid)
	}
}

// With no servers given, the session starts its own (PostgreSQL here,
// the store of record), reuses them across runs, and stops them on Close.
func TestSessionStartsAndStopsItsServers(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 1, "a lab session's runs and its own PostgreSQL")
	dir := t.TempDir()
	s, err := runner.NewSession(runner.Options{Dir: dir, NodeEnv: []string{nodeEnv}})
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
		require.GreaterOrEqual(t, rep.Ticks, 3, "two ticks of a job every tick, one of a job every two")
		misfired := 0 // a node whose timer fired past a tick's starting deadline (a loaded machine) says so
		for _, e := range rep.Events {
			if e.Kind == lab.EventMisfired && e.Node != 0 && e.Tick > 0 {
				misfired += misfiredCount(e)
			}
		}
		require.Equal(t, 2*rep.Ticks-misfired, rep.Executions, "both nodes run every job tick they do not report misfired")
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
// lets a node see a live optimistic claim of a job expired and steal it:
// the claim is a row per job key, claimed by compare-and-set on its
// version and stealable once its until (by the claimer's clock) is behind
// the stealer's. The holder is paused for less than the claim's TTL, so
// nobody else may steal it; the thief's clock then jumps 2.4 s ahead (8
// ticks: its scheduler fires the job's grid tick 8 ahead at once), past
// the claim's TTL. Fenced, the version check refuses the paused claimer's
// late write; unfenced it lands.
func TestSkewStepStealsOptimisticClaim(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(fencedName(fence), func(t *testing.T) {
			t.Parallel()
			c := short("optimistic", fence, "pause:holder@300ms+1s")
			c.TTL, c.Tick, c.Duration = 2*time.Second, 300*time.Millisecond, 14*300*time.Millisecond
			c.Catalog = catalog(t, "export=300ms/200ms")
			s := session(t)
			r, err := s.Start(t.Context(), c)
			require.NoError(t, err)
			events, cancel := r.Subscribe(0)
			defer cancel()
			paused := nextEvent(t, events, "the pause", func(e lab.Event) bool {
				return e.Kind == lab.EventChaos && strings.Contains(e.Detail, "paused with SIGSTOP")
			}).Node
			require.NotZero(t, paused)
			thief := paused%3 + 1
			step, err := lab.ParseChaos(fmt.Sprintf("skew:node%d=+2400ms", thief))
			require.NoError(t, err)
			require.NoError(t, r.Inject(t.Context(), step))
			ctx, cancelWait := context.WithTimeout(t.Context(), within)
			defer cancelWait()
			rep, err := r.Wait(ctx)
			require.NoError(t, err)
			rep, st := report(t, s, r, rep)
			requireLabelKept(t, rep, st)
			f, ok := findFault(t, rep, "paused with SIGSTOP")
			require.True(t, ok)
			require.NotNil(t, f.victim)
			// The claim was renewed every TTL/3 until the pause, so by an
			// honest clock it is live for the whole pause: the first node to
			// claim the job during the pause is the thief, which could claim
			// it only by its jump. (An honest node may read the ledger first:
			// the thief, its clock ahead, can skip the tick it stole as past
			// its starting deadline and release the claim to it.)
			for _, e := range rep.Events {
				if e.Kind == lab.EventClaimed && e.Job == f.job && e.Node != f.node && e.T > f.at && e.T < f.to {
					require.Equal(t, thief, e.Node, "node%d claimed %s during node%d's pause, before the thief node%d", e.Node, f.job, paused, thief)
					break
				}
			}
			requireFaultOutcome(t, rep, st, "paused with SIGSTOP", true)
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
