package runner_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/lab"
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
