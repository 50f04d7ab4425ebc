package runner_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// Re-fires in real runs: a tick run again after it had committed. Each
// run's report is checked against the store by run (requireConsistent):
// its re-fires are what SQL over the audit rows counts, and the nodes'
// events agree.

// afterRestart is a run of one job every 2 s that kills the next node to
// commit, at 0 s, 2 s and (kills 3) 4 s, while node3's clock lags by lag:
// node3 tries each tick lag after the others, by when the tick has
// committed. A lease held in a store (pg-lease: LockAtLeastFor, 1 s,
// outlives the holder) keeps node3 out; a lock held by the holder's
// process (pg-advisory: its connection) dies with it, and node3 runs the
// tick again.
func afterRestart(t *testing.T, strategy string, fence bool, lag time.Duration, kills int) lab.Config {
	var chaos []string
	for i := range kills {
		chaos = append(chaos, fmt.Sprintf("kill:committer@%ds", 2*i))
	}
	c := short(strategy, fence, append(chaos, fmt.Sprintf("skew:node3=-%s", lag))...)
	c.Tick, c.Duration, c.TTL, c.Work = time.Second, 8*time.Second, time.Second, 100*time.Millisecond
	c.Catalog = catalog(t, "export=2s/100ms")
	require.NoError(t, c.Validate())
	return c
}

var committedRE = regexp.MustCompile(`killed with SIGKILL, the committer, right after it committed (\S+) tick (\d+)`)

// killedAfterCommit returns, for each kill of a committer, the job tick
// it had committed and when it was killed.
func killedAfterCommit(t *testing.T, rep *lab.Report) map[[2]string]float64 {
	t.Helper()
	out := map[[2]string]float64{}
	for _, e := range rep.Events {
		if m := committedRE.FindStringSubmatch(e.Detail); e.Kind == lab.EventChaos && m != nil {
			out[[2]string{m[1], m[2]}] = e.T
		}
	}
	return out
}

// reentered counts the sections that entered a killed committer's tick
// after the kill, and so after its commit: re-fires when they commit.
func reentered(t *testing.T, rep *lab.Report, st store) (entered, committed int) {
	killed := killedAfterCommit(t, rep)
	for _, s := range sections(rep) {
		if at, ok := killed[[2]string{s.job, strconv.Itoa(s.tick)}]; ok && s.enter > at {
			entered++
			if st.committed(s.attempt) {
				committed++
			}
		}
	}
	return entered, committed
}

// A replica killed right after its run succeeded forgets the advisory
// lock it held for LockAtLeastFor: node3, whose clock lags by less than
// that, finds the lock free and runs the tick again. The report counts it
// as a re-fire, from the store and from the nodes' events, and names the
// harm; pg-advisory's label allows it.
func TestRefireAfterRestart(t *testing.T) {
	t.Parallel()
	c := afterRestart(t, "pg-advisory", false, 700*time.Millisecond, 3)
	rep, st := runUntil(t, session(t), c, func(rep *lab.Report) string {
		if len(killedAfterCommit(t, rep)) == 0 {
			return "no committer was killed"
		}
		return ""
	})
	requireLabelKept(t, rep, st)
	entered, committed := reentered(t, rep, st)
	t.Logf("%d kills after a commit; %d sections entered a killed committer's tick after the kill, %d committed; %d re-fires", len(killedAfterCommit(t, rep)), entered, committed, rep.Refires)
	require.Positive(t, committed, "node3 ran a killed committer's tick again, after the kill: the lock died with the holder")
	require.GreaterOrEqual(t, rep.Refires, committed, "each of them is a re-fire")
	require.Zero(t, rep.RetriedRefires, "lease mode retries nothing")
	require.Contains(t, rep.Harms, lab.HarmRefire)
	require.Contains(t, rep.Harms, lab.HarmDuplicate, "a re-fire that committed is a duplicate")
	require.True(t, rep.StoreAgrees, rep.Disagreement)
}

// The same restarts under strategies the lab labels safe: no tick runs
// again after it committed, except, run-key and leader mode, a reaper's
// retry of a run whose end the kill lost. pg-lease: the lease row
// outlives its holder (node3 lags by less than LockAtLeastFor).
// pg-unique: the killed run's row, still running, keeps the job's next
// tick out (overlap forbid), so two kills (the third would find no
// commit). queue: the leader killed, then paused past its lease; the
// next leader enqueues no tick enqueued before.
func TestNoRefireAfterFailover(t *testing.T) {
	t.Parallel()
	queue := short("queue", true, "kill:leader@1s", "pause:leader@3500ms+1500ms")
	queue.Duration, queue.TTL = 16*queue.Tick, time.Second
	queue.Catalog = catalog(t, "export=400ms/100ms,report=800ms/100ms")
	for name, c := range map[string]lab.Config{
		"pg-lease":  afterRestart(t, "pg-lease", true, 300*time.Millisecond, 3),
		"pg-unique": afterRestart(t, "pg-unique", true, 300*time.Millisecond, 2),
		"queue":     queue,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rep, st := run(t, session(t), c)
			requireLabelKept(t, rep, st)
			require.NotContains(t, rep.Harms, lab.HarmRefire)
			require.Equal(t, rep.RetriedRefires, rep.Refires, "every re-fire is a reaper's retry")
			if c.Strategy == "pg-lease" {
				require.Zero(t, rep.Refires)
			}
			if c.Strategy != "queue" {
				require.NotEmpty(t, killedAfterCommit(t, rep), "a committer was killed")
				return
			}
			// The leader changed: a node other than the one killed was
			// elected after the kill.
			kill := chaosEvent(t, rep.Events, lab.EventChaos, "killed with SIGKILL, the leader")
			require.True(t, slices.ContainsFunc(rep.Events, func(e lab.Event) bool {
				return e.Kind == lab.EventElected && e.T > kill.T && e.Node != kill.Node
			}), "another node was elected after node%d, the leader, was killed", kill.Node)
			require.True(t, strings.Contains(chaosEvent(t, rep.Events, lab.EventChaos, "pause:leader").Detail, "the leader"))
		})
	}
}
