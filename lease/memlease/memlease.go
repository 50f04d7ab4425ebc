// Package memlease is an in-process aegis.Locker, for tests and for programs
// that run as one process.
//
// It keeps every key's token counter for the life of the Locker, so tokens
// increase across releases and expiries like every other backend's. It does
// not coordinate separate processes: two programs each with a memlease
// Locker both hold the same key. Expiry uses this process's monotonic clock.
//
// Waiting is first come, first served: [aegis.Acquire] (Locker implements
// [aegis.Waiter]) queues the caller behind the key's earlier waiters, and a
// grant to anyone else, TryAcquire included, is refused (ErrHeld) while a
// waiter is queued, so a holder that releases and asks again at once cannot
// starve them. A release or an expiry wakes the first waiter.
package memlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/owner"
)

var (
	_ aegis.Locker   = (*Locker)(nil)
	_ aegis.Notifier = (*Locker)(nil)
	_ aegis.Waiter   = (*Locker)(nil)
)

// Locker is an in-process lease table. The zero value is not usable; call New.
type Locker struct {
	mu      sync.Mutex
	keys    map[string]*entry
	waiters map[string]map[chan struct{}]struct{}
}

type entry struct {
	token   aegis.Token // last token granted; kept after release and expiry
	owner   string      // "" when free
	expires time.Time
	queue   []*waiter // Acquire callers, first come first
}

// waiter is one caller blocked in Acquire.
type waiter struct {
	wake chan struct{} // signalled when it is first and the key may be free
}

// New returns an empty Locker.
func New() *Locker {
	return &Locker{
		keys:    make(map[string]*entry),
		waiters: make(map[string]map[chan struct{}]struct{}),
	}
}

// TryAcquire grants key for ttl unless another owner's lease is live
// (ErrHeld).
func (m *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(key)
	if len(e.queue) > 0 || !e.free(now) {
		return nil, aegis.ErrHeld
	}
	return e.grant(key, ttl, now), nil
}

// Acquire implements aegis.Waiter: it blocks until key is granted for ttl
// or ctx ends, behind every caller that started waiting before it. When ctx
// ends it returns an error wrapping ctx.Err() and leaves the queue.
func (m *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	queued := false
	for {
		if err := ctx.Err(); err != nil {
			m.leave(key, w, queued)
			return nil, fmt.Errorf("acquire %q: %w", key, err)
		}
		now := time.Now()
		m.mu.Lock()
		e := m.entry(key)
		first := len(e.queue) == 0 || e.queue[0] == w
		if first && e.free(now) {
			if queued {
				e.queue = e.queue[1:]
				// The next waiter is first now: it must wait for this
				// lease's expiry too, not only for its release.
				m.wakeFirst(e)
			}
			lease := e.grant(key, ttl, now)
			m.mu.Unlock()
			return lease, nil
		}
		if !queued {
			e.queue = append(e.queue, w)
			queued = true
		}
		// The first waiter also wakes when the lease expires: an expiry
		// sends nothing.
		var expiry <-chan time.Time
		stop := func() bool { return false }
		if e.queue[0] == w && e.owner != "" {
			timer := time.NewTimer(e.expires.Sub(now))
			expiry, stop = timer.C, timer.Stop
		}
		m.mu.Unlock()
		select {
		case <-w.wake:
		case <-expiry:
		case <-ctx.Done():
		}
		stop()
	}
}

// leave removes w from key's queue; when it was first, the next waiter may
// now take a free key.
func (m *Locker) leave(key string, w *waiter, queued bool) {
	if !queued {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.keys[key]
	for i, q := range e.queue {
		if q == w {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			break
		}
	}
	m.wakeFirst(e)
}

// entry returns key's entry, creating it. m.mu must be held.
func (m *Locker) entry(key string) *entry {
	e := m.keys[key]
	if e == nil {
		e = &entry{}
		m.keys[key] = e
	}
	return e
}

// free reports whether no live lease holds the entry's key.
func (e *entry) free(now time.Time) bool {
	return e.owner == "" || !now.Before(e.expires)
}

// grant gives the entry's key to a new owner for ttl.
func (e *entry) grant(key string, ttl time.Duration, now time.Time) *aegis.Lease {
	e.token++
	e.owner = owner.New()
	e.expires = now.Add(ttl)
	return &aegis.Lease{
		Key:      key,
		Token:    e.token,
		Owner:    e.owner,
		TTL:      ttl,
		Deadline: driver.LocalDeadline(now, ttl),
	}
}

// wakeFirst signals the first waiter of e, if any. m.mu must be held.
func (m *Locker) wakeFirst(e *entry) {
	if len(e.queue) == 0 {
		return
	}
	select {
	case e.queue[0].wake <- struct{}{}:
	default: // already signalled
	}
}

// Renew extends l to now+ttl if it still holds its key; ErrLost otherwise.
func (m *Locker) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	if err := driver.CheckTTL(ttl, 0); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("renew %q: %w", l.Key, err)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.holds(l, now) {
		return aegis.ErrLost
	}
	m.keys[l.Key].expires = now.Add(ttl)
	l.TTL = ttl
	l.Deadline = driver.LocalDeadline(now, ttl)
	return nil
}

// Release frees l's key if l still holds it; ErrLost otherwise, changing
// nothing. The first waiter in Acquire and the subscribers of Notify are
// woken.
func (m *Locker) Release(ctx context.Context, l *aegis.Lease) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release %q: %w", l.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.holds(l, time.Now()) {
		return aegis.ErrLost
	}
	e := m.keys[l.Key]
	e.owner = ""
	m.wakeFirst(e)
	for ch := range m.waiters[l.Key] {
		select {
		case ch <- struct{}{}:
		default: // already signalled
		}
	}
	return nil
}

// Notify implements aegis.Notifier: the channel receives a value when key
// is released.
func (m *Locker) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.waiters[key] == nil {
		m.waiters[key] = make(map[chan struct{}]struct{})
	}
	m.waiters[key][ch] = struct{}{}
	m.mu.Unlock()
	stop := func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.waiters[key], ch)
		if len(m.waiters[key]) == 0 {
			delete(m.waiters, key)
		}
	}
	return ch, stop, nil
}

// holds reports whether l is the live grant of its key. m.mu must be held.
func (m *Locker) holds(l *aegis.Lease, now time.Time) bool {
	e := m.keys[l.Key]
	return e != nil && e.owner == l.Owner && e.token == l.Token && now.Before(e.expires)
}
