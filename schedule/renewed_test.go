package schedule_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/schedule"
)

// A run's events say when its lease or run row expires unless renewed:
// EventRun at the claim's start + LockAtMostFor, each keep-alive renewal
// (EventRenewed) later; none after the job returned. In run-key mode and
// in lease mode, on PostgreSQL.
func TestRunAndRenewedUntil(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"run-key", "lease"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := pgReplica(t, pgURL(t))
			log := &runLog{}
			began, returned := make(chan time.Time, 1), make(chan time.Time, 1) // the first run's
			// Renewals every second: a loaded machine that pauses the
			// keep-alive for two does not lose the run's lease or row.
			const ttl = 3 * time.Second
			job := schedule.Job{Name: "renewed-" + mode, Every: time.Second, LockAtMostFor: ttl,
				Run: func(ctx context.Context) error {
					first := time.Now()
					log.record(ctx)
					// Past three renewals (every TTL/3), half a period
					// before the fourth.
					time.Sleep(ttl + ttl/6)
					select {
					case began <- first:
						returned <- time.Now()
					default:
					}
					return nil
				}}
			cfg := &schedule.Config{Node: "node-1", OnEvent: log.onEvent}
			if mode == "run-key" {
				cfg.Store = r.store
			} else {
				cfg.Locker = r.locker
			}
			s := start(t, cfg, job)
			done := func() bool { return len(log.eventsOf(schedule.EventDone)) > 0 }
			waitFor(t, 20*time.Second, done, "the run ended")
			stop(t, s)
			begin, end := <-began, <-returned // sent before the first run's EventDone

			runs := log.eventsOf(schedule.EventRun)
			require.NotEmpty(t, runs)
			run := runs[0]
			require.False(t, run.Until.IsZero(), "EventRun says when the %s expires", mode)
			// The claim's start + LockAtMostFor: the claim began after the
			// tick fired and before the job began.
			claimed := run.Until.Add(-ttl)
			require.False(t, claimed.Before(run.Fire), "EventRun's Until less LockAtMostFor (%s) is before the tick fired (%s)", claimed, run.Fire)
			require.False(t, claimed.After(begin), "EventRun's Until less LockAtMostFor (%s) is after the job began (%s)", claimed, begin)
			var renewed []schedule.Event
			for _, e := range log.eventsOf(schedule.EventRenewed) {
				if e.Fire.Equal(run.Fire) {
					renewed = append(renewed, e)
				}
			}
			require.NotEmpty(t, renewed, "the keep-alive renewed the %s", mode)
			prev := run.Until
			for i, e := range renewed {
				require.Equal(t, run.Token, e.Token, fmt.Sprintf("renewal %d", i))
				require.True(t, e.Until.After(prev), "renewal %d moves the expiry on (%s, then %s)", i, prev, e.Until)
				require.True(t, e.Until.Add(-ttl).Before(end), "renewal %d began before the job returned", i)
				prev = e.Until
			}
		})
	}
}
