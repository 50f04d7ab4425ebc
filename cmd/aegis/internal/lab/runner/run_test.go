package runner_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// session returns a lab session on the shared test servers (isolated by a
// schema and the run's own keys), whose nodes are this test binary, with
// env (NAME=value) in their environment.
func session(t *testing.T, env ...string) *runner.Session {
	t.Helper()
	testenv.Reserve(t, 1, "a lab session's runs")
	s, err := runner.NewSession(runner.Options{
		Dir: t.TempDir(),
		Servers: runner.Servers{
			PostgresURL:   testenv.PostgresURL(t),
			RedisAddrs:    testenv.RedisAddrs(t),
			EtcdEndpoints: testenv.EtcdEndpoints(t),
			ZKServers:     testenv.ZKServers(t),
			NATSURLs:      testenv.NATSURLs(t),
		},
		NodeEnv: append([]string{nodeEnv}, env...),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// short is a run of six 400 ms ticks over the default catalog (three jobs,
// every one, two and three ticks, working 200, 100 and 300 ms), three
// nodes, a 600 ms TTL (at least the three-tick job's 600 ms
// LockAtLeastFor: see TestShortTTLStarts). The work is the margin the lab
// has to pause or cut the holder after it reports it read the ledger,
// before it writes: ample on a loaded 2-core machine.
func short(strategy string, fence bool, chaos ...string) lab.Config {
	c := lab.Config{Strategy: strategy, Fence: fence, Nodes: 3, Duration: 6 * 400 * time.Millisecond, Tick: 400 * time.Millisecond, Work: 200 * time.Millisecond, TTL: 600 * time.Millisecond}
	for _, spec := range chaos {
		ch, err := lab.ParseChaos(spec)
		if err != nil {
			panic(err)
		}
		c.Chaos = append(c.Chaos, ch)
	}
	return c
}

// catalog parses a --catalog spec for a test's run.
func catalog(t *testing.T, spec string) []lab.JobSpec {
	t.Helper()
	jobs, err := lab.ParseCatalog(spec)
	require.NoError(t, err)
	return jobs
}

// untargeted is the note of a fault whose target never came: no node
// entered the critical section (or began a write) in the whole run.
var untargeted = regexp.MustCompile(`: nothing to target$`)

// run runs c to its end and checks its report against the store (see
// runUntil): a run whose fault found no target (no node entered the
// critical section, or began a write, from the fault's time to the run's
// end) has not exercised its case.
func run(t *testing.T, s *runner.Session, c lab.Config) (*lab.Report, store) {
	t.Helper()
	return runUntil(t, s, c, func(rep *lab.Report) string {
		for _, n := range rep.Notes {
			if untargeted.MatchString(n) {
				return n
			}
		}
		return ""
	})
}

// runUntil runs c and checks its report against the store: safety is
// judged in every run. unexercised says why a run could not judge the
// test's case ("" when it could). Such a run is run again only when its
// own record says the machine was the cause (a node no fault touched ran
// a tick late, or the nodes were slow to answer the lab before the
// start), on a slower clock (see slower), up to maxSlower times slower;
// without a cause, or when the slowest run cannot either, the test fails
// with what the runs recorded.
func runUntil(t *testing.T, s *runner.Session, c lab.Config, unexercised func(*lab.Report) string) (*lab.Report, store) {
	t.Helper()
	rep, r := runOnce(t, s, c)
	rep, st := checked(t, s, r, rep)
	why := unexercised(rep)
	if why == "" {
		return rep, st
	}
	cause := machineCause(rep)
	if cause == "" {
		t.Fatalf("run %s did not exercise the test's case: %s; its record shows no cause (every node was ready and ran its ticks on time), so the lab or the strategy is wrong. Notes:\n%s",
			r.ID, why, strings.Join(rep.Notes, "\n"))
	}
	// The machine ran the nodes late: the same run again, on a slower
	// clock, so that the same lateness is a smaller part of a tick.
	for k := 2; k <= maxSlower; k++ {
		c, ok := slower(c, k)
		clock := fmt.Sprintf("%d times slower (ticks of %s)", k, c.Tick)
		if !ok {
			clock = "on the same clock (its edits' cadences are text)"
		}
		t.Logf("run %s did not exercise the test's case: %s; its record says why: %s; running it again %s", r.ID, why, cause, clock)
		rep, r = runOnce(t, s, c)
		rep, st = checked(t, s, r, rep)
		if why = unexercised(rep); why == "" {
			return rep, st
		}
		if cause = machineCause(rep); cause == "" {
			break
		}
	}
	t.Fatalf("run %s did not exercise the test's case either: %s; cause: %s. Notes:\n%s",
		r.ID, why, cmp.Or(cause, "none in its record"), strings.Join(rep.Notes, "\n"))
	return nil, store{}
}

// maxSlower is how much slower the last run of a case the machine kept
// its nodes from is run (runUntil).
const maxSlower = 3

// slower returns c with every duration k times as long: the ticks, the
// work, the TTL, the catalog's cadences and the faults' times, so that
// the run forces the same case. An edit's cadence is text, so a run that
// edits the catalog keeps its clock (ok false).
func slower(c lab.Config, k int) (_ lab.Config, ok bool) {
	for _, ch := range c.Chaos {
		if ch.Spec != "" {
			return c, false
		}
	}
	d := time.Duration(k)
	c.Duration, c.Tick, c.Work, c.TTL = c.Duration*d, c.Tick*d, c.Work*d, c.TTL*d
	c.Catalog = slices.Clone(c.Catalog)
	for i := range c.Catalog {
		c.Catalog[i].Every *= d
		c.Catalog[i].Work *= d
	}
	c.Chaos = slices.Clone(c.Chaos)
	for i := range c.Chaos {
		c.Chaos[i].At *= d
		c.Chaos[i].For *= d
		c.Chaos[i].Offset *= d
	}
	return c, true
}

// machineCause returns the notes of a report that say the machine, not
// the run's faults, kept its nodes from their ticks ("" if none does).
func machineCause(rep *lab.Report) string {
	var causes []string
	for _, n := range rep.Notes {
		if strings.HasPrefix(n, lab.MachineLate) || strings.Contains(n, "the machine is too busy") || strings.Contains(n, "slow to answer the lab") {
			causes = append(causes, n)
		}
	}
	return strings.Join(causes, "; ")
}

// runOnce runs c to its end.
func runOnce(t *testing.T, s *runner.Session, c lab.Config) (*lab.Report, *runner.Run) {
	t.Helper()
	c.OutDir = t.TempDir()
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), c.Duration+c.Window()+2*time.Minute)
	defer cancel()
	rep, err := r.Wait(ctx)
	require.NoError(t, err, "the run did not end")
	return rep, r
}

// checked checks a run's report against the store.
func checked(t *testing.T, s *runner.Session, r *runner.Run, rep *lab.Report) (*lab.Report, store) {
	t.Helper()
	rep, st := report(t, s, r, rep)
	for _, n := range rep.Notes {
		require.NotContains(t, n, "did not end by itself", "every node finishes its run")
	}
	return rep, st
}

// report logs a run's summary (and its events and the tails of its nodes'
// logs, if the test fails) and checks it against the store.
func report(t *testing.T, s *runner.Session, r *runner.Run, rep *lab.Report) (*lab.Report, store) {
	t.Helper()
	logRun(t, s, r, rep)
	return rep, requireConsistent(t, r, rep)
}

// logRun logs a run's summary, and its events and the tails of its nodes'
// logs if the test fails.
func logRun(t *testing.T, s *runner.Session, r *runner.Run, rep *lab.Report) {
	t.Helper()
	var b strings.Builder
	_ = rep.WriteSummary(&b)
	t.Log("\n" + b.String())
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logEvents(t, rep)
		logs, _ := filepath.Glob(filepath.Join(s.Dir(), r.ID+"-node*.log"))
		for _, path := range logs {
			data, _ := os.ReadFile(path)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("%s (last lines):\n%s", filepath.Base(path), strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
}

func fencedName(fence bool) string { return map[bool]string{false: "unfenced", true: "fenced"}[fence] }

// none: every node runs every tick of every job, each reading the ledger
// its peers read at the same moment.
func TestNoneAppliesEveryTickOncePerNode(t *testing.T) {
	t.Parallel()
	rep, st := run(t, session(t), short("none", false))
	require.False(t, rep.Fenced)
	// A node whose timer fires past the tick's starting deadline (a loaded
	// machine) reports the tick misfired instead of running it: every node
	// either ran every tick or said why not.
	misfired := map[string]map[int][]int{} // job → tick → nodes
	total := 0
	for _, e := range rep.Events {
		if e.Kind == lab.EventMisfired && e.Node != 0 && e.Tick > 0 {
			if misfired[e.Job] == nil {
				misfired[e.Job] = map[int][]int{}
			}
			misfired[e.Job][e.Tick] = append(misfired[e.Job][e.Tick], e.Node)
			total += misfiredCount(e)
		}
	}
	require.Equal(t, 3*rep.Ticks-total, rep.Executions, "every node runs every tick it does not report misfired")
	applied := 0
	for _, jr := range rep.Jobs {
		require.Positive(t, jr.Ticks, "%s fired", jr.Name)
		dups := 0
		for tick, rows := range st[jr.Name].executed {
			var nodes []int
			for _, a := range rows {
				nodes = append(nodes, a.node)
			}
			require.ElementsMatch(t, []int{1, 2, 3}, append(nodes, misfired[jr.Name][tick]...), "%s tick %d: applied once by each node that did not misfire it", jr.Name, tick)
			if len(rows) > 1 {
				dups++
			}
		}
		require.Equal(t, dups, jr.DuplicatesApplied, "%s: the ticks applied more than once", jr.Name)
		applied += dups
		if dups > 0 {
			require.Equal(t, lab.CheckViolation, jr.Checker, jr.Name)
		}
	}
	require.Positive(t, applied, "ticks applied by several nodes")
	require.Positive(t, rep.LostUpdates, "nodes read the same ledger value and each wrote it + 1")
	require.Contains(t, rep.Harms, lab.HarmDuplicate)
	require.Contains(t, rep.Harms, lab.HarmLostUpdate)
	requireLabelKept(t, rep, st) // none excludes nothing
}

// misfiredCount is how many of a node's job ticks a misfired event
// stands for: one, or the N of "N ticks dropped by policy skip" (a node
// late by several ticks drops them in one event).
func misfiredCount(e lab.Event) int {
	if m := droppedRE.FindStringSubmatch(e.Detail); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 1
}

var droppedRE = regexp.MustCompile(`^(\d+) ticks dropped by policy`)

// misfiredTick reports whether a node reported tick misfired.
func misfiredTick(rep *lab.Report, tick int) bool {
	for _, e := range rep.Events {
		if e.Kind == lab.EventMisfired && e.Tick == tick {
			return true
		}
	}
	return false
}

// hasKind reports whether the run has an event of kind.
func hasKind(rep *lab.Report, kind string) bool {
	for _, e := range rep.Events {
		if e.Kind == kind {
			return true
		}
	}
	return false
}

// misfires counts the misfired events of a run's nodes.
func misfires(rep *lab.Report) int {
	n := 0
	for _, e := range rep.Events {
		if e.Kind == lab.EventMisfired {
			n++
		}
	}
	return n
}

// pg-unique: one run row per (job, fire time), so each tick of each job
// runs once; with no fault the ticks of a job do not overlap either.
func TestPGUniqueRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(fencedName(fence), func(t *testing.T) {
			t.Parallel()
			rep, st := run(t, session(t), short("pg-unique", fence))
			require.Equal(t, fence, rep.Fenced)
			// Each tick is entered once or not at all. A tick nobody ran is
			// one the scheduler chose not to start, and says so (a loaded
			// machine: timers past the starting deadline, ticks dropped by
			// the catch-up policy, a run overrunning its tick): with no
			// misfire, every tick runs.
			// On a quiet machine (no misfire, no reclaim: a heartbeat late
			// enough for its row to expire is retried by a reaper, and the
			// late one refused) each tick is entered once and runs.
			require.GreaterOrEqual(t, rep.Executions, rep.Ticks-rep.MissedTicks, "each tick run was entered")
			if misfires(rep) == 0 && !hasKind(rep, lab.EventReclaim) {
				require.Equal(t, rep.Ticks, rep.Executions, "each job tick entered once")
				require.Zero(t, rep.MissedTicks, "no node misfired, and a tick was missed")
				require.Zero(t, rep.DuplicateTicks)
				require.Zero(t, rep.StaleRejected)
				require.Zero(t, rep.DuplicatesApplied)
				require.Zero(t, rep.LostUpdates)
				require.Equal(t, lab.CheckOK, rep.Checker)
				for _, jr := range rep.Jobs {
					require.Equal(t, int64(jr.Ticks), jr.Ledger, "%s: its ledger counts each tick", jr.Name)
				}
			}
			// A retry's harms (at least once) are the label's business.
			requireLabelKept(t, rep, st)
		})
	}
}

// The holder paused past its TTL (twice it): its successor, at a later
// tick of the job, gets the lease with a greater token and registers it
// when it reads. Fenced, the paused holder's late write is refused;
// unfenced it lands, a lost update when both read the same value. Every
// run keeps its strategy's label (an unfenced lease still runs each tick
// once: a tick is tried only at its fire time).
func TestPauseHolder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		strategy string
		edit     func(*lab.Config)
	}{
		{"pg-lease", nil},
		{"sqlite", nil},
		{"optimistic", nil},
		// etcd: a lease of at least the test servers' minimum, 1 s.
		{"etcd", func(c *lab.Config) { c.TTL = time.Second }},
		// zookeeper: a session as long as the TTL; its expiry is seen a
		// little after it.
		{"zookeeper", func(c *lab.Config) { c.Chaos[0].For = 1500 * time.Millisecond }},
		// queue: a worker paused past its job's lease; the reaper hands the
		// job to another worker with a greater token.
		{"queue", nil},
	}
	for _, tt := range tests {
		for _, fence := range []bool{false, true} {
			t.Run(tt.strategy+"/"+fencedName(fence), func(t *testing.T) {
				t.Parallel()
				c := short(tt.strategy, fence, "pause:holder@500ms+1200ms")
				if tt.edit != nil {
					tt.edit(&c)
				}
				c.Chaos[0].For = max(c.Chaos[0].For, 2*c.TTL)
				rep, st := run(t, session(t), c)
				require.Equal(t, fence, rep.Fenced)
				requireLabelKept(t, rep, st)
				requireFaultOutcome(t, rep, st, "paused with SIGSTOP", true)
			})
		}
	}
}

// A holder killed inside its critical section is restarted (a new
// incarnation). pg-lease: its lease expires, nothing is applied twice.
// pg-unique: its run row expires and a reaper retries the run with a
// greater token (run attempt 2 or more); the only harm a retry may do is a
// retried duplicate (a run killed after its commit).
func TestKillHolder(t *testing.T) {
	t.Parallel()
	t.Run("pg-lease", func(t *testing.T) {
		t.Parallel()
		rep, st := run(t, session(t), short("pg-lease", true, "kill:holder@500ms"))
		requireLabelKept(t, rep, st)
		requireKilledAndRestarted(t, rep)
	})
	t.Run("pg-unique", func(t *testing.T) {
		t.Parallel()
		// One job every 2 s: its next tick is far behind the retry of a
		// killed run (the row expires after the TTL, 600 ms), which a
		// later tick's start would abandon instead.
		c := short("pg-unique", true, "kill:holder@0s")
		c.Catalog = catalog(t, "export=2s/300ms")
		rep, st := run(t, session(t), c)
		requireLabelKept(t, rep, st)
		requireKilledAndRestarted(t, rep)
		for _, h := range rep.Harms {
			require.Equal(t, lab.HarmRetryDuplicate, h)
		}
		f, ok := findFault(t, rep, "killed with SIGKILL")
		require.True(t, ok)
		require.NotNil(t, f.victim, "node%d was inside %s tick %d when killed", f.node, f.job, f.tick)
		var retried bool
		for _, a := range st[f.job].executed[f.tick] {
			if a.runAttempt >= 2 {
				retried = true
				require.Greater(t, a.token, f.victim.token, "the retry of %s tick %d has a greater token", f.job, f.tick)
			}
		}
		require.True(t, retried, "%s tick %d, killed in its run, was retried (run attempt 2 or more): %+v", f.job, f.tick, st[f.job].executed[f.tick])
		require.True(t, slices.ContainsFunc(rep.Events, func(e lab.Event) bool {
			return e.Kind == lab.EventReclaim && e.Job == f.job && e.Tick == f.tick && strings.Contains(e.Detail, "retrying a crashed run")
		}), "a reaper's reclaim event for %s tick %d", f.job, f.tick)
	})
}

func requireKilledAndRestarted(t *testing.T, rep *lab.Report) {
	t.Helper()
	var killed, restarted bool
	for _, e := range rep.Events {
		killed = killed || (e.Kind == lab.EventChaos && strings.Contains(e.Detail, "killed with SIGKILL"))
		restarted = restarted || (e.Kind == lab.EventStarted && strings.Contains(e.Detail, "incarnation 2"))
	}
	require.True(t, killed, "a node was killed")
	require.True(t, restarted, "and restarted")
}

// A holder cut from its servers loses its lease; when the partition heals,
// its retried write reaches the store if the tick's window has not ended:
// unfenced it lands, fenced it is refused once a successor read with a
// greater token. pg-advisory: the partition drops the lock's connection,
// and the lock with it; nothing can fence the holder's late write.
func TestPartitionHolder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		strategy string
		fence    bool
	}{{"pg-lease", false}, {"pg-lease", true}, {"pg-advisory", false}} {
		t.Run(tt.strategy+"/"+fencedName(tt.fence), func(t *testing.T) {
			t.Parallel()
			rep, st := run(t, session(t), short(tt.strategy, tt.fence, "partition:holder@500ms+800ms"))
			requireLabelKept(t, rep, st)
			requireFaultOutcome(t, rep, st, "cut from its servers", false)
		})
	}
}

// pg-advisory: the paused holder keeps its connection, so it keeps the
// lock: nobody else runs its job while it is paused.
func TestAdvisoryPause(t *testing.T) {
	t.Parallel()
	rep, st := run(t, session(t), short("pg-advisory", true, "pause:holder@500ms+1s"))
	require.False(t, rep.Fenced, "pg-advisory has no token to fence with")
	requireLabelKept(t, rep, st)
	f, ok := findFault(t, rep, "paused with SIGSTOP")
	require.True(t, ok)
	require.NotNil(t, f.victim)
	for _, s := range f.sections {
		if s.job == f.job && s.node != f.node {
			require.False(t, s.entered > f.at && s.entered < f.to, "node%d entered %s tick %d at %.3fs, while node%d held its lock, paused (%.3fs to %.3fs)",
				s.node, s.job, s.tick, s.entered, f.node, f.at, f.to)
		}
	}
	requireFaultOutcome(t, rep, st, "paused with SIGSTOP", true)
	// No successor can read while it holds the lock: its pause, held
	// past FOR for one, ends at its bound, and says so.
	var healed lab.Event
	for _, e := range rep.Events {
		if e.Kind == lab.EventHealed && e.Node == f.node {
			healed = e
		}
	}
	require.Regexp(t, `^node[0-9] resumed with SIGCONT after [0-9.]+s: the 1s asked(, then held for a successor until [0-9.]+s, its bound: no other node read|; no other node had read .* and no tick of it is left)`, healed.Detail, "the pause's end")
}

// A skewed node fires its ticks by its own clock: with its clock 400 ms
// ahead, it enters each tick before the tick fires on the real clock,
// which an honest node never does.
func TestSkewFiresEarly(t *testing.T) {
	t.Parallel()
	c := short("none", false, "skew:node2=+400ms")
	c.Tick, c.Duration, c.Nodes = 600*time.Millisecond, 8*600*time.Millisecond, 2
	c.Catalog = catalog(t, "export=600ms/200ms")
	entries := func(rep *lab.Report) map[[2]int]float64 {
		first := map[[2]int]float64{} // (tick, node) → entered at
		for _, e := range rep.Events {
			if _, seen := first[[2]int{e.Tick, e.Node}]; e.Kind == lab.EventEntered && !seen {
				first[[2]int{e.Tick, e.Node}] = e.T
			}
		}
		return first
	}
	// Ticks 2 to 8 entered by both nodes: the ones compared below.
	both := func(first map[[2]int]float64) int {
		n := 0
		for tick := 2; tick <= 8; tick++ {
			_, ok1 := first[[2]int{tick, 1}]
			_, ok2 := first[[2]int{tick, 2}]
			if ok1 && ok2 {
				n++
			}
		}
		return n
	}
	rep, st := runUntil(t, session(t), c, func(rep *lab.Report) string {
		if n := both(entries(rep)); n < 3 {
			return fmt.Sprintf("both nodes entered %d of ticks 2 to 8, the rest misfired", n)
		}
		return ""
	})
	requireLabelKept(t, rep, st)
	first := entries(rep)
	// Not tick 1: node2 fires it 400 ms early, which may be before the lab
	// sent the start time (200 to 800 ms before tick 1), and a node runs
	// nothing before it knows the start.
	// A tick a node misfired (a loaded machine) is not compared; most are.
	compared := 0
	for tick := 2; tick <= 8; tick++ {
		fire := (time.Duration(tick-1) * rep.Config.Tick).Seconds()
		skewed, ok2 := first[[2]int{tick, 2}]
		honest, ok1 := first[[2]int{tick, 1}]
		if !ok1 || !ok2 {
			require.True(t, misfiredTick(rep, tick), "tick %d: a node did not enter it, and no node reported it misfired", tick)
			continue
		}
		compared++
		require.GreaterOrEqual(t, honest, fire-0.001, "tick %d: node1 (honest) entered at %.3fs, before the tick fired at %.3fs", tick, honest, fire)
		require.Less(t, skewed, fire, "tick %d: node2 (clock +400ms) entered at %.3fs, not before the tick fired at %.3fs", tick, skewed, fire)
	}
	require.GreaterOrEqual(t, compared, 3, "both nodes entered at least three of ticks 2 to 8")
}

// Clocks that differ by more than a job's LockAtLeastFor (half its
// cadence: 200 ms for the one-tick job) let a lease strategy run a tick
// twice, in sequence: the label no longer excludes it, a duplicate is
// reported as a duplicate, never as unsafe; the ledger is still kept
// (fenced, the second run's greater token is accepted after the first's).
func TestSkewBeyondLockAtLeastFor(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"pg-lease", "optimistic"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			rep, st := run(t, session(t), short(strategy, true, "skew:node2=+300ms"))
			s, _ := lab.LookupStrategy(strategy)
			excluded := s.Excludes(rep.Config)
			require.NotContains(t, excluded, lab.HarmDuplicate, "skew 300ms is beyond the 200ms LockAtLeastFor")
			require.Contains(t, excluded, lab.HarmLostUpdate)
			requireLabelKept(t, rep, st)
			if rep.DuplicatesApplied > 0 {
				require.Contains(t, rep.Harms, lab.HarmDuplicate)
				require.NotContains(t, rep.Unsafe, lab.HarmDuplicate)
			}
		})
	}
}

// Latency through the proxies slows every round trip but changes no
// outcome.
func TestLatency(t *testing.T) {
	t.Parallel()
	// Each round trip to PostgreSQL takes 15 ms longer: about ten of them a
	// tick, so the tick is longer than short's.
	c := short("pg-lease", true, "latency:postgres=15ms")
	c.Tick, c.Work, c.Duration, c.TTL = 500*time.Millisecond, 50*time.Millisecond, 4*500*time.Millisecond, time.Second
	rep, st := run(t, session(t), c)
	requireLabelKept(t, rep, st)
	require.Zero(t, rep.DuplicatesApplied)
	require.Zero(t, rep.LostUpdates)
	require.True(t, slices.ContainsFunc(rep.Events, func(e lab.Event) bool {
		return e.Kind == lab.EventChaos && e.Detail == "latency:postgres=15ms"
	}))
}

// A TTL the backend refuses ends the nodes at once with the backend's
// reason, instead of retrying for the whole run.
func TestRefusedTTLEndsTheNodes(t *testing.T) {
	t.Parallel()
	c := short("zookeeper", true)
	c.TTL = 2 * time.Minute // longer than the servers' 60 s maximum ZooKeeper session
	c.OutDir = t.TempDir()
	s := session(t)
	r, err := s.Start(t.Context(), c)
	if err != nil {
		// A node that fired a tick before it reported ready (a slow first
		// read of the catalog) ends before the run starts: the start fails
		// with its reason.
		require.ErrorContains(t, err, "exited before it was ready")
		require.ErrorContains(t, err, "aegis: invalid argument: ttl 2m0s")
		return
	}
	// The run's window is 2 × TTL and more: nodes that kept trying would
	// last 4 minutes. Bounded, and stopped when it is not over by then.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err := r.Wait(ctx)
	if err != nil {
		r.Stop()
		stopped, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		rep, err = r.Wait(stopped)
		require.NoError(t, err)
		_, _ = report(t, s, r, rep)
		t.Fatalf("the nodes did not end within 30s of a TTL the backend refuses; notes: %q", rep.Notes)
	}
	rep, _ = report(t, s, r, rep)
	require.Zero(t, rep.Executions)
	require.Len(t, rep.Notes, 3)
	require.Contains(t, rep.Notes[0], "aegis: invalid argument: ttl 2m0s")
}

// A configuration Validate accepts starts: a TTL shorter than half a job's
// cadence (the LockAtLeastFor lease mode gives the job) is either refused
// by Validate, naming the flag, or run.
func TestShortTTLStarts(t *testing.T) {
	t.Parallel()
	c := short("pg-lease", true)
	c.TTL = 500 * time.Millisecond // the three-tick job's LockAtLeastFor is 600 ms
	if err := c.Validate(); err != nil {
		require.ErrorContains(t, err, "--ttl")
		return
	}
	rep, st := run(t, session(t), c)
	requireLabelKept(t, rep, st)
}
