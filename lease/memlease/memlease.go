// Package memlease is an in-process aegis.Locker, for tests and for programs
// that run as one process.
//
// It keeps every key's token counter for the life of the Locker, so tokens
// increase across releases and expiries like every other backend's. It does
// not coordinate separate processes: two programs each with a memlease
// Locker both hold the same key. Expiry uses this process's monotonic clock.
package memlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/owner"
)

var (
	_ aegis.Locker   = (*Locker)(nil)
	_ aegis.Notifier = (*Locker)(nil)
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
	if err := aegis.CheckKey(key); err != nil {
		return nil, err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.keys[key]
	if e == nil {
		e = &entry{}
		m.keys[key] = e
	}
	if e.owner != "" && now.Before(e.expires) {
		return nil, aegis.ErrHeld
	}
	e.token++
	e.owner = owner.New()
	e.expires = now.Add(ttl)
	return &aegis.Lease{
		Key:      key,
		Token:    e.token,
		Owner:    e.owner,
		TTL:      ttl,
		Deadline: aegis.LocalDeadline(now, ttl),
	}, nil
}

// Renew extends l to now+ttl if it still holds its key; ErrLost otherwise.
func (m *Locker) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(l); err != nil {
		return err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
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
	l.Deadline = aegis.LocalDeadline(now, ttl)
	return nil
}

// Release frees l's key if l still holds it; ErrLost otherwise, changing
// nothing. Waiters subscribed through Notify are woken.
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
	m.keys[l.Key].owner = ""
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
