package schedule

import (
	"sync"
	"time"
)

// Clock is the scheduler's source of fire times: when a tick is due, and
// how late it is. Leases, run rows and their expiry use store time and this
// process's monotonic clock, never a Clock. Tests inject one to move time
// ([ManualClock]) or to skew a replica ([OffsetClock]).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Wake returns a channel that is closed once Now() has reached at, and
	// a function that releases the timer if it is no longer needed.
	Wake(at time.Time) (<-chan struct{}, func())
}

// SystemClock is the real clock.
func SystemClock() Clock { return OffsetClock(0) }

// OffsetClock is the real clock moved by d: a replica whose clock is d
// ahead (d > 0) or behind (d < 0).
func OffsetClock(d time.Duration) Clock { return offsetClock(d) }

type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

func (c offsetClock) Wake(at time.Time) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	t := time.AfterFunc(time.Until(at.Add(-time.Duration(c))), func() { close(ch) })
	return ch, func() { t.Stop() }
}

// ManualClock is a Clock that moves only when told to. Its methods are
// safe for concurrent use.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*waiter]struct{}
	changed chan struct{} // closed and replaced when a waiter is added
}

type waiter struct {
	at time.Time
	ch chan struct{}
}

// NewManualClock returns a ManualClock that reads now.
func NewManualClock(now time.Time) *ManualClock {
	return &ManualClock{now: now, waiters: make(map[*waiter]struct{}), changed: make(chan struct{})}
}

// Now implements Clock.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Wake implements Clock.
func (c *ManualClock) Wake(at time.Time) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{at: at, ch: make(chan struct{})}
	if !c.now.Before(at) {
		close(w.ch)
		return w.ch, func() {}
	}
	c.waiters[w] = struct{}{}
	close(c.changed)
	c.changed = make(chan struct{})
	return w.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.waiters, w)
	}
}

// Advance moves the clock forward by d and wakes the waiters that are due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for w := range c.waiters {
		if !c.now.Before(w.at) {
			close(w.ch)
			delete(c.waiters, w)
		}
	}
}

// Waiters returns how many Wake channels are pending, and a channel that
// is closed when another one is added: a test advances the clock once the
// scheduler waits.
func (c *ManualClock) Waiters() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters), c.changed
}
