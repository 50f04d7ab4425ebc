// Package losswatch judges, in a test, Hold's promise against a successor:
// a holder cut off from its store works by a local deadline that comes
// before the store grants the key to another owner, and its context is done
// by the time that grant returns.
//
// The cancellation is a timer firing at the deadline, and a timer fires late
// on a starved machine: a pause no library prevents (the fence exists for
// it). So a context not yet done when the grant returns is allowed the
// lateness measured on a probe, a deadline context for the same instant in
// the same process, and the failure says how late the probe was. A Held
// that never stops, or stops a TTL late, still fails: its lateness is the
// TTL's, not the machine's.
package losswatch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// Watch watches one Held for its successor.
type Watch struct {
	h        *aegis.Held
	deadline time.Time        // the probe's instant
	stopped  <-chan time.Time // when h's context was seen done
	fired    <-chan time.Time // when the probe was seen done
}

// Start watches h. Call it once no renewal of h can succeed any more (its
// deadline no longer moves) and before a successor can be granted the key.
// The probe ends with t at the latest.
func Start(t testing.TB, h *aegis.Held) *Watch {
	deadline := h.Lease().Deadline
	probe, cancel := context.WithDeadline(context.Background(), deadline) // as Hold bounds a renewal
	t.Cleanup(cancel)
	return &Watch{h: h, deadline: deadline, stopped: stamp(h.Context()), fired: stamp(probe)}
}

// Require fails t unless the holder's local deadline came before granted,
// when the successor's grant returned, and the holder's context was done by
// then (done: whether h.Context().Err() was set right after the grant
// returned), or late by no more than twice the probe's lateness plus the
// lease's clock-drift margin ([driver.Drift] of its TTL). It waits at most
// bound for the holder's context and for the probe, and returns when the
// holder's context was seen done. Call it once.
func (w *Watch) Require(t testing.TB, granted time.Time, done bool, bound time.Duration) time.Time {
	t.Helper()
	lease := w.h.Lease()
	require.False(t, granted.Before(lease.Deadline), "the holder's local deadline is %s after the successor's grant returned", lease.Deadline.Sub(granted))
	at := await(t, w.stopped, bound, "the holder's context was never cancelled although a successor holds the key")
	if done {
		return at
	}
	late := await(t, w.fired, bound, "a probe context with the holder's deadline never ended").Sub(w.deadline)
	// The holder's stamp is one goroutine hop longer than the probe's (its
	// renewal's), hence twice the lateness.
	allowed := 2*late + driver.Drift(lease.TTL)
	require.LessOrEqual(t, at.Sub(granted), allowed,
		"the holder was not cancelled when the successor's grant returned (%s after its local deadline) but %s later; "+
			"a deadline context for the same instant ended %s late in this process, which allows %s",
		granted.Sub(lease.Deadline), at.Sub(granted), late, allowed)
	return at
}

// stamp returns a channel that receives the time ctx is seen done.
func stamp(ctx context.Context) <-chan time.Time {
	at := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() { at <- time.Now() })
	return at
}

// await returns the time c receives, failing t with msg if none comes within
// bound.
func await(t testing.TB, c <-chan time.Time, bound time.Duration, msg string) time.Time {
	t.Helper()
	select {
	case at := <-c:
		return at
	case <-time.After(bound):
		t.Fatalf("%s (waited %s)", msg, bound)
		return time.Time{}
	}
}
