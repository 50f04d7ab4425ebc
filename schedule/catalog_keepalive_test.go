package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// A catalog schedule with DisableKeepAlive keeps it in its row, and its
// run is cancelled at LockAtMostFor with aegis.ErrLost (ShedLock without
// KeepAliveLockProvider); an edit without it turns keep-alive back on.
func TestCatalogDisableKeepAlive(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, _ string, r *replica) {
		ctx := t.Context()
		cat := openCatalog(t, r, &schedule.CatalogConfig{EditDelay: 100 * time.Millisecond})
		e, err := cat.Put(ctx, schedule.Entry{Name: "short", Every: time.Second, Handler: "wait", LockAtMostFor: 300 * time.Millisecond, DisableKeepAlive: true})
		require.NoError(t, err)
		require.True(t, e.DisableKeepAlive)
		got, err := cat.Get(ctx, "short")
		require.NoError(t, err)
		require.True(t, got.DisableKeepAlive, "the row keeps it")

		causes := make(chan error, 8)
		s, err := schedule.New(&schedule.Config{Node: "n", Locker: r.locker, Catalog: cat})
		require.NoError(t, err)
		require.NoError(t, s.Handle("wait", func(ctx context.Context, _ json.RawMessage) error {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second): // the test's receive fails first
			}
			causes <- context.Cause(ctx)
			return nil
		}))
		require.NoError(t, s.Start(ctx))
		t.Cleanup(s.Stop)
		cause := testenv.Recv(t, causes, 15*time.Second, "the run to end at LockAtMostFor")
		require.True(t, errors.Is(cause, aegis.ErrLost), "cancelled at LockAtMostFor without keep-alive: %v", cause)

		e.DisableKeepAlive = false
		_, err = cat.Put(ctx, schedule.Entry{Name: "short", Every: time.Second, Handler: "wait", LockAtMostFor: 300 * time.Millisecond})
		require.NoError(t, err)
		got, err = cat.Get(ctx, "short")
		require.NoError(t, err)
		require.False(t, got.DisableKeepAlive, "an edit without it turns keep-alive on")
	})
}
