// Package backoff computes jittered exponential delays, and waits them out
// unless a wake-up comes first.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is exponential backoff with "equal jitter": the n-th delay is
// uniformly distributed in [d/2, d], where d = min(Max, Min·2ⁿ). Half the
// delay is random, so waiters that failed together spread out, and the
// other half keeps the sequence growing.
type Backoff struct {
	Min time.Duration
	Max time.Duration
}

// Delay returns the delay before retry number attempt (0 for the first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Min
	for i := 0; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep blocks for d or until ctx ends, and reports whether d passed; a d
// of zero or less reports only whether ctx is live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	_, err := Wait(ctx, nil, d) // no wake channel: only d or ctx ends it
	return err == nil
}

// Wait blocks for d, until wake fires, or until ctx ends, and reports
// whether wake fired. A closed wake channel (a failed subscription) is
// treated as no channel: the timer decides. When ctx ends it returns
// ctx.Err().
func Wait(ctx context.Context, wake <-chan struct{}, d time.Duration) (woken bool, err error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case _, ok := <-wake:
			if ok {
				return true, nil
			}
			wake = nil
		case <-timer.C:
			return false, nil
		}
	}
}
