package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/actor"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// A handler's context says who runs it (internal/actor), as its Run does:
// the fence names the writer of a write it refuses from it. In run-key and
// lease mode.
func TestHandlerContextCarriesWriter(t *testing.T) {
	for _, mode := range []string{"run-key", "lease"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := sqliteReplica(t, sqlitePath(t))
			cfg := &schedule.Config{Node: "node-a", Store: r.store}
			if mode == "lease" {
				cfg = &schedule.Config{Node: "node-a", Locker: r.locker}
			}
			type seen struct {
				run schedule.Run
				w   actor.Writer
				ok  bool
			}
			got := make(chan seen, 1)
			start(t, cfg, schedule.Job{Name: "nightly", Every: time.Second, LockAtMostFor: 10 * time.Second, Run: func(ctx context.Context) error {
				run, _ := schedule.RunFrom(ctx)
				w, ok := actor.From(ctx)
				select {
				case got <- seen{run, w, ok}:
				default:
				}
				return nil
			}})
			s := testenv.Recv(t, got, time.Minute, "the job's first run")
			require.True(t, s.ok, "the handler's context carries its writer")
			require.Equal(t, actor.Writer{Node: "node-a", Schedule: "nightly", Fire: s.run.Fire, Attempt: s.run.Attempt, Token: int64(s.run.Token)}, s.w)
			require.Positive(t, s.w.Attempt)
		})
	}
}
