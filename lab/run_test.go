package lab_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testenv"
	"github.com/aegislab/aegis/lab"
)

// session returns a lab session on the shared test servers (isolated by a
// schema and the run's own keys), whose nodes are this test binary.
func session(t *testing.T) *lab.Session {
	t.Helper()
	s, err := lab.NewSession(lab.Options{
		Dir: t.TempDir(),
		Servers: lab.Servers{
			PostgresURL:   testenv.PostgresURL(t),
			RedisAddrs:    testenv.RedisAddrs(t),
			EtcdEndpoints: testenv.EtcdEndpoints(t),
			ZKServers:     testenv.ZKServers(t),
		},
		NodeEnv: []string{nodeEnv},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// short is a run of six 400 ms ticks. The work (200 ms) is the margin the
// lab has to pause or cut the holder after it reports it entered the
// critical section, before it writes: ample on a loaded 2-core machine.
// The tick leaves the lease free half the time, so that the nodes that
// poll for it get it (with work close to the tick, the holder takes the
// next tick's lease before the others wake, and they starve).
func short(strategy string, fence bool, chaos ...string) lab.Config {
	c := lab.Config{Strategy: strategy, Fence: fence, Nodes: 3, Duration: 6 * 400 * time.Millisecond, Tick: 400 * time.Millisecond, Work: 200 * time.Millisecond, TTL: 500 * time.Millisecond}
	for _, spec := range chaos {
		ch, err := lab.ParseChaos(spec)
		if err != nil {
			panic(err)
		}
		c.Chaos = append(c.Chaos, ch)
	}
	return c
}

func run(t *testing.T, s *lab.Session, c lab.Config) *lab.Report {
	t.Helper()
	c.OutDir = t.TempDir()
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), c.Duration+c.Window()+2*time.Minute)
	defer cancel()
	rep, err := r.Wait(ctx)
	require.NoError(t, err, "the run did not end")
	var b strings.Builder
	_ = rep.WriteSummary(&b)
	t.Log("\n" + b.String())
	t.Cleanup(func() {
		if t.Failed() { // the whole story, for a failure in CI
			var ev strings.Builder
			for _, e := range rep.Events {
				v := ""
				if e.Value != nil {
					v = fmt.Sprintf(" value %d", *e.Value)
				}
				fmt.Fprintf(&ev, "%7.3f node%d %s tick %d token %d %s%s %s\n", e.T, e.Node, e.Kind, e.Tick, e.Token, e.Attempt, v, e.Detail)
			}
			t.Log("events:\n" + ev.String())
		}
	})
	requireConsistent(t, r.ID, rep)
	return rep
}

func TestNoneDuplicates(t *testing.T) {
	t.Parallel()
	rep := run(t, session(t), short("none", false))
	require.Equal(t, 6, rep.Ticks)
	require.Equal(t, 18, rep.Executions, "every node runs every tick")
	require.Equal(t, 6, rep.DuplicateTicks)
	require.Equal(t, 6, rep.DuplicatesApplied)
	require.Equal(t, 0, rep.MissedTicks)
}

// pg-unique: the row is the exclusion, per tick. (Not across ticks: when a
// tick's winner is still working as the next tick's starts, the two
// overlap on the balance, so lost updates and the checker are not
// asserted here.)
func TestPGUniqueNoDuplicates(t *testing.T) {
	t.Parallel()
	rep := run(t, session(t), short("pg-unique", false))
	require.Equal(t, 6, rep.Executions)
	require.Zero(t, rep.DuplicateTicks)
	require.Zero(t, rep.DuplicatesApplied)
	require.Zero(t, rep.MissedTicks)
}

// The holder paused past its TTL, unfenced: once another node entered its
// tick, its late write lands on top of its successor's, a duplicate, and
// the checker finds the overlap (run checks the counts against SQL).
func TestPauseUnfencedAppliesDuplicate(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"pg-lease", "sqlite"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			rep := run(t, session(t), short(strategy, false, "pause:holder@500ms+1500ms"))
			require.False(t, rep.Fenced)
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// Fenced, the same pause applies nothing twice: the fence refuses the
// resumed holder, and the history is linearizable.
func TestPauseFencedRefusesStaleWrite(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"pg-lease", "sqlite"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			rep := run(t, session(t), short(strategy, true, "pause:holder@500ms+1500ms"))
			requireSafe(t, rep)
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// A holder killed inside its critical section is replaced once its lease
// expires, and restarted; nothing is applied twice. (Whether its tick is
// taken over within its window is a race with the window: run checks that
// missed_ticks is what SQL says.)
func TestKillHolder(t *testing.T) {
	t.Parallel()
	rep := run(t, session(t), short("pg-lease", true, "kill:holder@500ms"))
	requireSafe(t, rep)
	var killed, restarted bool
	for _, e := range rep.Events {
		killed = killed || (e.Kind == lab.EventChaos && strings.Contains(e.Detail, "killed with SIGKILL"))
		restarted = restarted || (e.Kind == lab.EventStarted && strings.Contains(e.Detail, "incarnation 2"))
	}
	require.True(t, killed)
	require.True(t, restarted)
}

// pg-unique's winner killed inside its tick leaves that tick undone (its
// row claimed, nobody else may run it). Killed in the last tick (the kill
// comes as it fires), the run ends as its nodes finish, before the tick's
// window closes: the report counts the tick missed, and the events say so
// too (the dashboard draws them).
func TestMissedTickAtTheEndHasItsEvent(t *testing.T) {
	t.Parallel()
	rep := run(t, session(t), short("pg-unique", false, "kill:holder@2s")) // tick 6 fires at 2 s
	// The killed winner's attempt: which tick it was in is a race (the
	// kill takes the node inside the critical section at 2 s, or the next
	// to enter it); that its tick is missed then is not.
	killed, at := 0, 0.0
	for _, e := range rep.Events {
		if e.Kind == lab.EventChaos && strings.Contains(e.Detail, "killed with SIGKILL") {
			killed, at = e.Node, e.T
		}
	}
	require.NotZero(t, killed, "a node was killed")
	entered := map[string]bool{}
	for _, e := range rep.Events {
		if e.Kind == lab.EventEntered && e.Node == killed && e.T <= at {
			entered[e.Attempt] = true
		}
	}
	var victim lab.Attempt // its last attempt that had read before the kill
	for _, a := range rep.Attempts {
		if entered[a.ID] {
			victim = a
		}
	}
	require.NotEmpty(t, victim.ID, "node%d was inside a tick when killed", killed)
	var want []int
	if victim.Outcome != lab.Committed { // it was killed before its write landed
		want = []int{victim.Tick}
	}
	var missed []int
	for _, e := range rep.Events {
		if e.Kind == lab.EventMissed {
			missed = append(missed, e.Tick)
		}
	}
	require.Equal(t, want, missed, "one missed event, for the killed winner's tick (%s)", victim.Outcome)
	require.Equal(t, len(want), rep.MissedTicks, "the killed winner's tick is undone, the others done")
	t.Logf("the kill took tick %d of %d", victim.Tick, rep.Ticks)
}

// A holder cut from its servers loses its lease; when the partition heals,
// its retried write reaches the store (if the tick's window has not ended):
// unfenced it lands, fenced it is refused. Which comes first, the
// successor's entry or the heal, is a race: the test asserts what each
// interleaving forces (a fresh clone's make test once failed here when the
// successor read after the holder's write, in sequence: a duplicate the
// checker of a counter calls linearizable).
func TestPartitionHolder(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(map[bool]string{false: "unfenced", true: "fenced"}[fence], func(t *testing.T) {
			t.Parallel()
			rep := run(t, session(t), short("pg-lease", fence, "partition:holder@500ms+800ms"))
			if fence {
				requireSafe(t, rep)
			}
			requireTakeoverOutcome(t, rep, false)
		})
	}
}

// pg-advisory: the paused holder keeps its connection, so it keeps the
// lock: no duplicate, the other nodes wait.
func TestAdvisoryPause(t *testing.T) {
	t.Parallel()
	rep := run(t, session(t), short("pg-advisory", true, "pause:holder@500ms+1s"))
	require.False(t, rep.Fenced, "pg-advisory has no token to fence with")
	require.Zero(t, rep.DuplicateTicks)
	require.Zero(t, rep.DuplicatesApplied)
	require.Equal(t, lab.CheckOK, rep.Checker)
}

// optimistic: a claim older than its TTL is stolen from the paused
// claimer; its version is the tick's fencing token.
func TestOptimisticPause(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(map[bool]string{false: "unfenced", true: "fenced"}[fence], func(t *testing.T) {
			t.Parallel()
			rep := run(t, session(t), short("optimistic", fence, "pause:holder@500ms+1500ms"))
			if fence {
				requireSafe(t, rep)
			}
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// A skewed node fires its ticks by its own clock: with its clock 400 ms
// ahead, it enters each tick before the tick fires on the real clock,
// which an honest node never does.
func TestSkew(t *testing.T) {
	t.Parallel()
	c := short("none", false, "skew:node2=+400ms")
	c.Tick, c.Duration = 600*time.Millisecond, 4*600*time.Millisecond
	rep := run(t, session(t), c)
	first := map[[2]int]float64{} // (tick, node) → entered at
	for _, e := range rep.Events {
		if e.Kind == lab.EventEntered {
			first[[2]int{e.Tick, e.Node}] = e.T
		}
	}
	require.Equal(t, 12, rep.Executions, "every node runs every tick, tick 1 included")
	// Tick 1 fires 200 ms after the start line: node2 runs it at once.
	for tick := 2; tick <= rep.Ticks; tick++ {
		fire := (time.Duration(tick-1) * c.Tick).Seconds()
		skewed, ok2 := first[[2]int{tick, 2}]
		honest, ok1 := first[[2]int{tick, 1}]
		require.True(t, ok1 && ok2, "tick %d", tick)
		require.GreaterOrEqual(t, honest, fire-0.001, "tick %d: node1 (honest) entered at %.3fs, before the tick fired at %.3fs", tick, honest, fire)
		require.Less(t, skewed, fire, "tick %d: node2 (clock +400ms) entered at %.3fs, not before the tick fired at %.3fs", tick, skewed, fire)
	}
}

// Latency through the proxies slows every round trip but changes no
// outcome.
func TestLatency(t *testing.T) {
	t.Parallel()
	// Each round trip to PostgreSQL takes 15 ms longer: about ten of them a
	// tick, so the tick is longer than short's.
	c := short("pg-lease", true, "latency:postgres=15ms")
	c.Tick, c.Work, c.Duration = 500*time.Millisecond, 50*time.Millisecond, 4*500*time.Millisecond
	rep := run(t, session(t), c)
	requireSafe(t, rep)
	var applied bool
	for _, e := range rep.Events {
		applied = applied || (e.Kind == lab.EventChaos && e.Detail == "latency:postgres=15ms")
	}
	require.True(t, applied)
}

// pg-advisory: a partition drops the holder's connection, and the lock
// with it; another node takes it while the holder still works, and the
// holder's retried write lands when the partition heals (within the
// tick's window): nothing can fence it.
func TestAdvisoryPartition(t *testing.T) {
	t.Parallel()
	rep := run(t, session(t), short("pg-advisory", true, "partition:holder@500ms+800ms"))
	require.False(t, rep.Fenced, "pg-advisory has no token to fence with")
	requireTakeoverOutcome(t, rep, false)
}

// etcd: a session lease; the test servers' minimum lease is 1 s.
func TestEtcdPause(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(map[bool]string{false: "unfenced", true: "fenced"}[fence], func(t *testing.T) {
			t.Parallel()
			c := short("etcd", fence, "pause:holder@500ms+2s")
			c.TTL = time.Second
			rep := run(t, session(t), c)
			if fence {
				requireSafe(t, rep)
			}
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// zookeeper: the lab asks for a session as long as --ttl, so the holder
// paused past it loses its session and its lock, like any lease: another
// node enters the tick; unfenced, the resumed holder's write lands,
// fenced it is refused.
func TestZooKeeperPause(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(map[bool]string{false: "unfenced", true: "fenced"}[fence], func(t *testing.T) {
			t.Parallel()
			rep := run(t, session(t), short("zookeeper", fence, "pause:holder@500ms+1500ms"))
			if fence {
				requireSafe(t, rep)
			}
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// queue: a worker paused past its job's lease (--ttl) stops heartbeating;
// a reaper reclaims the job with a greater token and another worker runs
// the tick. Unfenced, the resumed worker's write lands (the queue refuses
// only its completion); fenced, CompleteTx refuses it and rolls it back.
// (Not asserted: the checker and lost updates, beyond run's checks. The
// queue excludes per job, not across jobs: the reclaimed tick's job can run
// alongside a later tick's, which is a lost update whatever the fence.)
func TestQueuePause(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(map[bool]string{false: "unfenced", true: "fenced"}[fence], func(t *testing.T) {
			t.Parallel()
			rep := run(t, session(t), short("queue", fence, "pause:holder@500ms+1500ms"))
			require.Equal(t, fence, rep.Fenced)
			if fence {
				requireSafe(t, rep)
			}
			if to, ok := findTakeover(rep); ok {
				require.Greater(t, to.successor.Token, to.stale.Token, "the reaper reclaimed the paused worker's job with a greater token")
			}
			requireTakeoverOutcome(t, rep, true)
		})
	}
}

// A TTL the backend refuses ends the nodes at once with the backend's
// reason, instead of retrying for the whole run.
func TestRefusedTTLEndsTheNodes(t *testing.T) {
	t.Parallel()
	c := short("zookeeper", true)
	c.TTL = 2 * time.Minute // longer than the servers' 60 s maximum ZooKeeper session
	rep := run(t, session(t), c)
	require.Zero(t, rep.Executions)
	require.Len(t, rep.Notes, 3)
	require.Contains(t, rep.Notes[0], "aegis: invalid argument: ttl 2m0s")
}
