package runner_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// A Redis lock, and Redlock: the holder paused past its TTL
// (twice it). On a slower scale than short's: Redlock's per-node timeout
// is a fraction of the TTL (25 ms of 500 ms), too little on a loaded CI
// machine; with a 1.5 s TTL it is 75 ms. Fenced, the ledger is kept (the
// resumed holder's write is refused); unfenced, a late write over its
// successor's that read the same value is a lost update.
func TestRedisPause(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"redis", "redlock"} {
		for _, fence := range []bool{false, true} {
			t.Run(strategy+"/"+fencedName(fence), func(t *testing.T) {
				t.Parallel()
				c := short(strategy, fence, "pause:holder@500ms+3s")
				// Eight ticks: the job's lease expires 1.5 s after the pause at
				// most, and some of its ticks fire after that, during the pause.
				c.Tick, c.TTL, c.Duration = 500*time.Millisecond, 1500*time.Millisecond, 8*500*time.Millisecond
				if strategy == "redlock" {
					// Redlock gives each of its nodes 5% of the TTL to answer
					// (75 ms of 1.5 s): too little on a loaded machine. The
					// same shape, twice as slow.
					c = short(strategy, fence, "pause:holder@1s+6s")
					c.Tick, c.TTL, c.Duration = time.Second, 3*time.Second, 8*time.Second
				}
				rep, st := run(t, session(t), c)
				requireLabelKept(t, rep, st)
				requireFaultOutcome(t, rep, st, "paused with SIGSTOP", true)
			})
		}
	}
}

// ownRedis is a session that starts its own Redis (six primaries and a
// replica of the first, private), since the faults kill and restart it.
func ownRedis(t *testing.T) *runner.Session {
	t.Helper()
	testenv.Reserve(t, 1, "a lab session's runs and its own Redis")
	s, err := runner.NewSession(runner.Options{
		Dir:     t.TempDir(),
		Servers: runner.Servers{PostgresURL: testenv.PostgresURL(t)},
		NodeEnv: []string{nodeEnv},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// A failover before replication loses a grant: the promoted replica's
// counter for that job's key is one behind, so the key's next grant can
// repeat the lost token, to another holder. Whatever the tokens did, the
// owner-aware fence keeps the ledger: no lost update, no write accepted
// with a lower token or an equal one from another holder. A section whose
// token went back to the first holder's (or below) once that holder had
// read is refused: the successor's liveness cost until the counter passes.
func TestRedisFailoverKeepsTheLedger(t *testing.T) {
	t.Parallel()
	c := short("redis", true, "failover:redis@0s")
	c.Tick, c.Work, c.TTL, c.Duration = 500*time.Millisecond, 300*time.Millisecond, time.Second, 6*500*time.Millisecond
	rep, st := run(t, ownRedis(t), c)
	requireLabelKept(t, rep, st)
	require.Zero(t, rep.LostUpdates)

	// The grant the failover lost: its chaos event names its node, tick
	// and token; its acquired event, its job.
	var lost lab.Event
	for _, e := range rep.Events {
		if e.Kind == lab.EventChaos && e.Token != 0 {
			lost = e
		}
	}
	require.NotZero(t, lost.Token, "the failover lost a grant")
	// The fault names the grant's job: an acquired event of that job with
	// its node, tick and token (two jobs' grants can share the rest).
	job := ""
	for _, e := range rep.Events {
		if e.Kind == lab.EventAcquired && e.Node == lost.Node && e.Tick == lost.Tick && e.Token == lost.Token && e.Job == lost.Job {
			job = e.Job
		}
	}
	require.NotEmpty(t, job, "node%d's grant of %s token %d at tick %d", lost.Node, lost.Job, lost.Token, lost.Tick)
	requireCaughtInside(t, rep, lost)
	secs := sections(rep)
	var first *section // the lost grant's section
	for _, s := range secs {
		if s.node == lost.Node && s.job == job && s.tick == lost.Tick && s.token == lost.Token {
			first = s
		}
	}
	if first == nil || first.entered < 0 {
		return // it never read: the fence never saw the lost token
	}
	for _, s := range secs {
		if s.job == job && s != first && s.token <= lost.Token && s.enter > first.entered {
			require.NotEqual(t, lab.EventExecuted, s.end, "%s: section %s (token %d) after node%d read with token %d", job, s.attempt, s.token, lost.Node, lost.Token)
			require.False(t, st.committed(s.attempt), "%s: section %s (token %d) committed after node%d read with token %d", job, s.attempt, s.token, lost.Node, lost.Token)
		}
	}
}

// requireCaughtInside asserts that the failover's kill (the chaos event
// lost) caught a holder inside: the grant it names was made after
// replication was cut, and its node entered the critical section with it
// (its read done) before the kill.
func requireCaughtInside(t *testing.T, rep *lab.Report, lost lab.Event) {
	t.Helper()
	cut := chaosEvent(t, rep.Events, lab.EventChaos, "replication from the primary").T
	granted, entered := false, false
	for _, e := range rep.Events {
		if e.T > lost.T || e.Node != lost.Node || e.Job != lost.Job || e.Tick != lost.Tick || e.Token != lost.Token {
			continue
		}
		switch {
		case e.Kind == lab.EventAcquired && e.T >= cut:
			granted = true
		case e.Kind == lab.EventEntered && granted:
			entered = true
		}
	}
	require.True(t, granted, "node%d was granted %s tick %d token %d after the cut (%.3fs), before the kill (%.3fs)", lost.Node, lost.Job, lost.Tick, lost.Token, cut, lost.T)
	require.True(t, entered, "node%d entered %s tick %d with token %d before the kill (%.3fs)", lost.Node, lost.Job, lost.Tick, lost.Token, lost.T)
}

var promotedRE = regexp.MustCompile(`replica (\S+), which never received`)

// A restart after a failover restarts the server the nodes use, the
// promoted replica: its token counters go back to nothing (a job's next
// grant has token 1). The end of the run puts the session's Redis back,
// so a next run in the session works.
func TestRedisRestartAfterFailover(t *testing.T) {
	t.Parallel()
	s := ownRedis(t)
	c := short("redis", true, "failover:redis@0s")
	c.Duration = 14 * c.Tick
	c.OutDir = t.TempDir()
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	events, cancel := r.Subscribe(0)
	defer cancel()
	kill := nextEvent(t, events, "the failover's kill", func(e lab.Event) bool {
		return e.Kind == lab.EventChaos && e.Token != 0
	})
	m := promotedRE.FindStringSubmatch(kill.Detail)
	require.NotNil(t, m, "the failover names the promoted replica: %s", kill.Detail)
	promoted := m[1]
	// A grant from the promoted replica of a token past the nodes' count:
	// that job's counter there is past what the nodes' first contended
	// grants after a reset can take (each contender's INCR takes one,
	// the winner's SET NX takes the key).
	grant := nextEvent(t, events, "a grant after the failover", func(e lab.Event) bool {
		return e.Kind == lab.EventAcquired && e.T > kill.T && e.Token > int64(c.Nodes)
	})
	before := r.Status().Elapsed
	ctx, cancelInject := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelInject()
	restart, err := lab.ParseChaos("restart:redis@0s")
	require.NoError(t, err)
	require.NoError(t, r.Inject(ctx, restart))
	drain(t, events, func(lab.Event) {})
	rep, err := r.Wait(ctx)
	require.NoError(t, err)
	rep, st := report(t, s, r, rep)
	requireLabelKept(t, rep, st)

	restarted := chaosEvent(t, rep.Events, lab.EventChaos, "restarted without persistence")
	require.Contains(t, restarted.Detail, promoted, "the restart is of the promoted replica, which the nodes use")
	var after []int64
	for _, e := range rep.Events {
		if e.Kind == lab.EventAcquired && e.Job == grant.Job && e.T >= before {
			after = append(after, e.Token)
		}
	}
	require.NotEmpty(t, after, "%s was granted after the restart", grant.Job)
	require.LessOrEqual(t, slices.Min(after), int64(c.Nodes), "%s's counter was gone after the restart: a grant of token %d at most (it had reached %d; grants after: %v)", grant.Job, c.Nodes, grant.Token, after)

	// The next run of the session has its Redis back: a primary the nodes
	// reach, every tick run.
	next, st := run(t, s, short("redis", true))
	requireLabelKept(t, next, st)
	require.Equal(t, lab.CheckOK, next.Checker)
	require.Positive(t, next.Executions)
	// A Redis the heal left broken fails grants (errors) or hands back
	// tokens the fence saw (refusals). A tick missed because the run
	// before it overran its tick, or a loaded machine's timer fired late,
	// is not a fault of the heal.
	for _, e := range next.Events {
		require.NotEqual(t, lab.EventError, e.Kind, "the next run's Redis answers: %s", e.Detail)
	}
	require.Zero(t, next.StaleRejected, "the next run's tokens start afresh and grow")
}

// A restart without persistence loses the token counters: tokens go back,
// and the fence refuses every holder of a job until its tokens pass the
// greatest the job's fence saw.
func TestRedisRestartSendsTokensBack(t *testing.T) {
	t.Parallel()
	c := short("redis", true, "restart:redis@1s")
	c.Duration = 10 * c.Tick
	rep, st := run(t, ownRedis(t), c)
	requireLabelKept(t, rep, st)
	restarted := -1.0
	for _, e := range rep.Events {
		if e.Kind == lab.EventChaos && strings.Contains(e.Detail, "restarted without persistence") {
			restarted = e.T
		}
	}
	require.GreaterOrEqual(t, restarted, 0.0, "Redis was restarted")
	secs := sections(rep)
	// Per job, the greatest token of a section that entered before the
	// restart: one holder at a time, so a later grant's is greater, unless
	// the counter went back.
	before := map[string]int64{}
	for _, s := range secs {
		if s.enter < restarted {
			before[s.job] = max(before[s.job], s.token)
		}
	}
	// The counters went back: a grant after the restart has a token no
	// greater than one before it. A grant whose tick the scheduler then
	// refused as misfired (due while Redis restarted, granted past its
	// starting deadline) counts: on a slow machine the misfires of the
	// ticks due during the restart can take every token that went back,
	// and no section enters with one.
	var granted []string
	for _, e := range rep.Events {
		if (e.Kind == lab.EventAcquired || e.Kind == lab.EventMisfired) && e.T > restarted && e.Token <= before[e.Job] {
			granted = append(granted, fmt.Sprintf("%s node%d %s token %d", e.Job, e.Node, e.Kind, e.Token))
		}
	}
	require.NotEmpty(t, granted, "after the restart a job's token went back (before it: %v)", before)
	// Every section that entered with a token that went back wrote
	// nothing: the fence refused it.
	var back []string
	for _, s := range secs {
		if s.enter > restarted && s.token <= before[s.job] {
			back = append(back, fmt.Sprintf("%s %s token %d", s.job, s.attempt, s.token))
			require.NotEqual(t, lab.EventExecuted, s.end, "%s: section %s's token %d went back (%d before the restart): the fence refuses it", s.job, s.attempt, s.token, before[s.job])
			require.False(t, st.committed(s.attempt), "%s: section %s's token %d went back: it has no EXECUTED row", s.job, s.attempt, s.token)
		}
	}
	if len(back) > 0 {
		require.GreaterOrEqual(t, rep.StaleRejected, 1, "the fence refused the tokens that went back: %v", back)
	}
	// The verdict counts a tick the fence refused as one the run
	// exercised: its reasons are the ones its final table gives.
	again := *rep
	again.Conclude(nil, nil)
	share := func(reasons []string) []string {
		return slices.DeleteFunc(slices.Clone(reasons), func(s string) bool { return !strings.Contains(s, "job ticks missed") })
	}
	require.Equal(t, share(again.Inconclusive), share(rep.Inconclusive))
}
