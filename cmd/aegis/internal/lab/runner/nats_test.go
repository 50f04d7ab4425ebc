package runner_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The nats strategy (natslease on the shared three-server cluster), its
// holder paused past its lease as the command pauses it
// (pause:holder@2s+3s): the stream's leader grants the expired key to a
// successor with a greater revision. Fenced, the resumed holder's late
// write is refused; unfenced it lands over the successor's that read the
// same value: a lost update. Both verdicts agree with SQL over the store
// (requireConsistent).
func TestNATSPauseHolder(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(fencedName(fence), func(t *testing.T) {
			t.Parallel()
			c := short("nats", fence, "pause:holder@2s+3s")
			// natslease grants whole seconds; ticks enough after the
			// holder wakes at 5 s for its late write.
			c.TTL, c.Duration = time.Second, 16*c.Tick
			rep, st := run(t, session(t), c)
			require.Equal(t, fence, rep.Fenced)
			require.True(t, rep.StoreAgrees, "the checker's verdict agrees with SQL over the store")
			requireLabelKept(t, rep, st)
			requireFaultOutcome(t, rep, st, "paused with SIGSTOP", true)
			f, ok := findFault(t, rep, "paused with SIGSTOP")
			require.True(t, ok)
			require.NotEmpty(t, f.successors(), "a successor took node%d's %s lease while it was paused", f.node, f.job)
			if fence {
				require.Equal(t, lab.EventStale, f.victim.end, "the resumed holder's late write is refused")
				require.Positive(t, rep.StaleRejected)
				require.Zero(t, rep.LostUpdates)
				require.Equal(t, lab.CheckOK, rep.Checker)
				return
			}
			require.Equal(t, lab.EventExecuted, f.victim.end, "unfenced, the resumed holder's late write lands")
			require.Positive(t, rep.LostUpdates, "over its successor's: a lost update")
			require.Equal(t, lab.CheckViolation, rep.Checker)
		})
	}
}

// kill:nats kills the server that leads the lease bucket's stream while
// the nodes hold leases; the two others elect a new leader for it, the
// run goes on, and the killed server comes back. A grant in flight when
// the leader dies is not answered until the stream has a new leader
// (natslease sends it again every 2 s): the log says how long the nodes
// went without a grant, from which the campaign's kill:nats row takes its
// stall.
func TestKillNATSLeader(t *testing.T) {
	t.Parallel()
	c := short("nats", true, "kill:nats@800ms")
	c.TTL, c.Duration = time.Second, 40*c.Tick
	rep, _ := run(t, ownServers(t, servers.KindNATS), c)
	killed := chaosEvent(t, rep.Events, lab.EventChaos, "killed with SIGKILL")
	require.Regexp(t, `^kill:nats@800ms: nats leader nats-\d of the lease bucket's stream \(pid \d+\) killed with SIGKILL; it restarts in 2s$`, killed.Detail)
	elected := chaosEvent(t, rep.Events, lab.EventChaos, " leads, elected within ")
	m := regexp.MustCompile(`nats leader (nats-\d) killed; (nats-\d) leads`).FindStringSubmatch(elected.Detail)
	require.NotNil(t, m, elected.Detail)
	require.NotEqual(t, m[1], m[2], "a new leader of the stream")
	back := chaosEvent(t, rep.Events, lab.EventHealed, m[1]+" restarted after ")
	requireDown(t, back, 1.9)
	require.Positive(t, executedAfter(rep.Events, elected.T), "the nodes commit under the new leader")
	for _, e := range rep.Events {
		if e.Kind == lab.EventAcquired && e.T > killed.T {
			t.Logf("the first grant after the kill came %.1fs after it (the stream's leader elected %.1fs after it)", e.T-killed.T, elected.T-killed.T)
			break
		}
	}
}

// A NATS server given in another form than nats://host:port is refused
// when a run starts, by its place in the list, never quoting it (a URL may
// carry a password).
func TestNATSURLForms(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"127.0.0.1:4222", "nats://127.0.0.1", "tls://127.0.0.1:4222", "nats://aegis:s3cret@127.0.0.1"} {
		t.Run(u, func(t *testing.T) {
			t.Parallel()
			testenv.Reserve(t, 1, "a lab session's runs")
			s, err := runner.NewSession(runner.Options{
				Dir:     t.TempDir(),
				Servers: runner.Servers{PostgresURL: testenv.PostgresURL(t), NATSURLs: []string{u}},
				NodeEnv: []string{nodeEnv},
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			c := short("nats", true)
			c.TTL = time.Second
			_, err = s.Start(t.Context(), c)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, "NATS server 1 is not a nats://host:port URL")
			require.NotContains(t, err.Error(), "s3cret")
		})
	}
}
