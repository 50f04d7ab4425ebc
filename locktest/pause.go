package locktest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// A loaded machine can pause a test for longer than a lease's TTL (the
// suite runs at a backend's smallest dependable TTL; on two cores beside a
// second suite, sleeps overran by up to half a second), and the store then
// lets the lease expire: the store keeping its promise, not a bug. A case
// whose assertions need the test to outrun a fraction of a TTL measures
// its own pauses; a scenario that a measured pause left undecided runs
// again.

// attempts is how many times a scenario left undecided by pauses runs
// before the case fails.
const attempts = 3

// decide runs scenario until it returns "", having judged the backend, at
// most attempts times; a scenario returns which measured pause left it
// undecided, and as many such pauses in a row fail t, naming them.
func decide(t *testing.T, scenario func() string) {
	t.Helper()
	var pauses []string
	for range attempts {
		p := scenario()
		if p == "" {
			return
		}
		pauses = append(pauses, p)
	}
	t.Fatalf("pauses of the test left the scenario undecided %d times in a row: %s", attempts, strings.Join(pauses, "; "))
}

// pausedPast describes how long ago since was, when that is ttl less the
// clock-drift margin or more: since is when the call that last granted or
// renewed a lease for ttl began, so the store may have let the lease expire
// by now. It returns "" when the lease must still be live.
func pausedPast(since time.Time, ttl time.Duration) string {
	if d := time.Since(since); d >= ttl-driver.Drift(ttl) {
		return fmt.Sprintf("%s after the lease's last grant or renewal began, past its TTL %s", d.Round(time.Millisecond), ttl)
	}
	return ""
}

// refused checks that b is refused k (ErrHeld, else t fails with msg) while
// the lease on k, last granted or renewed for ttl by a call that began at
// since, must be live. When b is granted k after a pause past that TTL, it
// releases that grant and returns the pause, for decide.
func (s *suite) refused(t *testing.T, ctx context.Context, b aegis.Locker, k string, since time.Time, ttl time.Duration, msg string) string {
	t.Helper()
	lb, err := b.TryAcquire(ctx, k, s.cfg.TTL)
	if p := pausedPast(since, ttl); p != "" && err == nil {
		require.NoError(t, b.Release(ctx, lb))
		return "another instance granted the key " + p
	}
	require.ErrorIs(t, err, aegis.ErrHeld, msg)
	return ""
}
