package schedule_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/schedule"
)

// A stopped Scheduler says so when started again, whether it ran or not;
// a running one says Start was called twice.
func TestStartAfterStop(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	ctx := context.Background()
	const stopped = "schedule: Start: the scheduler was stopped; a Scheduler cannot be restarted: make a new one"

	s := start(t, &schedule.Config{Store: r.store})
	err := s.Start(ctx)
	require.ErrorContains(t, err, "schedule: Start called twice")
	stop(t, s)
	err = s.Start(ctx)
	require.EqualError(t, err, stopped)
	require.ErrorIs(t, err, aegis.ErrInvalid)

	never, err := schedule.New(&schedule.Config{Store: r.store})
	require.NoError(t, err)
	stop(t, never)
	require.EqualError(t, never.Start(ctx), stopped, "stopped before it started")
}
