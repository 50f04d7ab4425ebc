package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGatherFor: after a full claim a producer waits for its slots only
// when its handlers are far shorter than a claim, and never when it
// claims ahead.
func TestGatherFor(t *testing.T) {
	p := newProducer(&Client{}, DefaultQueue, QueueConfig{MaxWorkers: 100})
	d, ok := p.gatherFor(time.Millisecond)
	require.True(t, ok, "no handler has run yet: the average is 0")
	require.Equal(t, time.Millisecond, d, "it waits a claim's length at most")

	for range 200 {
		p.observe(time.Millisecond)
	}
	_, ok = p.gatherFor(time.Millisecond)
	require.False(t, ok, "handlers as long as a claim (average %v): their slots would idle", time.Duration(p.handlerNanos.Load()))
	_, ok = p.gatherFor(10 * time.Millisecond)
	require.True(t, ok, "handlers a tenth of a claim")

	ahead := newProducer(&Client{}, DefaultQueue, QueueConfig{MaxWorkers: 100, ClaimAhead: 100})
	_, ok = ahead.gatherFor(time.Second)
	require.False(t, ok, "a queue that claims ahead keeps two claims in flight instead")
}

// TestGather: gather returns once every slot is free, or at its bound
// with slots still held, or at the end of its context.
func TestGather(t *testing.T) {
	p := newProducer(&Client{}, DefaultQueue, QueueConfig{MaxWorkers: 4})
	p.settle(p.reserve(), 4) // four jobs running

	done := make(chan struct{})
	go func() {
		defer close(done)
		p.gather(t.Context(), time.Hour)
	}()
	for range 4 {
		p.release()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("gather did not return within 10s of every slot being freed")
	}
	require.Equal(t, 4, p.free())

	p.settle(p.reserve(), 4)
	start := time.Now()
	p.gather(t.Context(), 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "no slot freed: it waits its bound")
	require.Equal(t, 0, p.free())

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p.gather(ctx, time.Hour) // returns at once: the context ended
}
