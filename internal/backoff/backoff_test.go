package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDelayBounds(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 10 * time.Millisecond, Max: 400 * time.Millisecond}
	tests := []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{0, 5 * time.Millisecond, 10 * time.Millisecond},
		{1, 10 * time.Millisecond, 20 * time.Millisecond},
		{3, 40 * time.Millisecond, 80 * time.Millisecond},
		{5, 160 * time.Millisecond, 320 * time.Millisecond},
		{6, 200 * time.Millisecond, 400 * time.Millisecond},
		{1000, 200 * time.Millisecond, 400 * time.Millisecond},
	}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := b.Delay(tt.attempt)
			require.GreaterOrEqual(t, d, tt.lo, "attempt %d", tt.attempt)
			require.LessOrEqual(t, d, tt.hi, "attempt %d", tt.attempt)
			seen[d] = true
		}
		require.Greater(t, len(seen), 1, "attempt %d: delays are not jittered", tt.attempt)
	}
}

func TestDelayZero(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), Backoff{}.Delay(3))
}

func TestWait(t *testing.T) {
	t.Parallel()
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	woken, err := Wait(t.Context(), wake, time.Minute)
	require.NoError(t, err)
	require.True(t, woken, "a wake-up ends the wait")

	closed := make(chan struct{})
	close(closed)
	woken, err = Wait(t.Context(), closed, time.Millisecond)
	require.NoError(t, err)
	require.False(t, woken, "a closed channel is no wake-up: the timer decides")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = Wait(ctx, nil, time.Minute)
	require.ErrorIs(t, err, context.Canceled)
}

// Sleep reports true when d passed, false when the context ended first.
func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep of 1ms with a live context reported that the context ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended context reported that d passed")
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Sleep with an ended context returned after %s", waited)
	}
}

// A Sleep of no time reports only whether the context is live.
func TestSleepZero(t *testing.T) {
	if !Sleep(context.Background(), 0) {
		t.Error("Sleep(0) with a live context reported that the context ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 { // a ready timer and an ended context: never true
		if Sleep(ctx, -time.Second) {
			t.Fatal("Sleep of no time with an ended context reported that d passed")
		}
	}
}
