// Package gocronadapter runs github.com/go-co-op/gocron/v2 schedulers on
// Aegis: a gocron.Locker on any aegis.Locker, and a gocron.Elector on an
// elect.Election.
//
// What gocron's distributed locker does not give, and this package cannot
// add: gocron passes Lock only the job's name, not its fire time, and does
// not pass the lease to the job, so there is no run key and no token for
// fenced writes. Replicas whose clocks differ by more than the job's run
// time run a tick twice unless LockAtLeastFor covers the difference. Use
// package schedule (run-key mode, TokenFrom) when that matters.
package gocronadapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/elect"
)

var (
	_ gocron.Locker  = (*Locker)(nil)
	_ gocron.Lock    = (*lock)(nil)
	_ gocron.Elector = (*Elector)(nil)
)

// LockerConfig configures a Locker. The zero value is valid.
type LockerConfig struct {
	// LockAtMostFor is the lease TTL. Default 30s.
	LockAtMostFor time.Duration
	// LockAtLeastFor keeps the lease after a run that ended early, until
	// this long after it started: set it above the clock difference between
	// replicas. Default 0; at most LockAtMostFor.
	LockAtLeastFor time.Duration
	// KeepAlive renews the lease every third of LockAtMostFor while the job
	// runs. Default false (ShedLock's default).
	KeepAlive bool
}

// Locker is a gocron.Locker: each job run takes the lease named after the
// job (gocron's key) on an aegis.Locker.
type Locker struct {
	locker aegis.Locker
	cfg    LockerConfig
}

// NewLocker returns a gocron.Locker on l. A nil cfg means defaults; the
// error names the field that is wrong.
func NewLocker(l aegis.Locker, cfg *LockerConfig) (*Locker, error) {
	if l == nil {
		return nil, invalid("gocronadapter: NewLocker: locker is nil")
	}
	var c LockerConfig
	if cfg != nil {
		c = *cfg
	}
	c.LockAtMostFor = cmp.Or(c.LockAtMostFor, 30*time.Second)
	switch {
	case c.LockAtMostFor < 0:
		return nil, invalid("gocronadapter: LockerConfig.LockAtMostFor %s is not positive", c.LockAtMostFor)
	case c.LockAtLeastFor < 0:
		return nil, invalid("gocronadapter: LockerConfig.LockAtLeastFor %s is negative", c.LockAtLeastFor)
	case c.LockAtLeastFor > c.LockAtMostFor:
		return nil, invalid("gocronadapter: LockerConfig.LockAtLeastFor %s is longer than LockAtMostFor %s", c.LockAtLeastFor, c.LockAtMostFor)
	}
	if err := driver.CheckTTL(c.LockAtMostFor, 0); err != nil {
		return nil, invalid("gocronadapter: LockerConfig.LockAtMostFor: %w", err)
	}
	return &Locker{locker: l, cfg: c}, nil
}

// Lock implements gocron.Locker: one TryAcquire of key. An error (the key
// is held, the store is unreachable) makes gocron skip the run.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	start := time.Now()
	lease, err := l.locker.TryAcquire(ctx, key, l.cfg.LockAtMostFor)
	if err != nil {
		return nil, fmt.Errorf("gocronadapter: lock %q: %w", key, err)
	}
	lk := &lock{l: l, lease: lease, start: start}
	if l.cfg.KeepAlive {
		lk.held = aegis.Keep(context.WithoutCancel(ctx), l.locker, lease)
	}
	return lk, nil
}

type lock struct {
	l     *Locker
	lease *aegis.Lease
	held  *aegis.Held
	start time.Time
	once  sync.Once
	err   error
}

// Unlock implements gocron.Lock: it releases the lease, or keeps it until
// LockAtLeastFor after the run began. aegis.ErrLost when it had expired.
func (k *lock) Unlock(ctx context.Context) error {
	k.once.Do(func() {
		keep := k.l.cfg.LockAtLeastFor - time.Since(k.start)
		switch {
		case k.held != nil:
			k.err = k.held.ReleaseAfter(ctx, keep)
		case keep > 0:
			k.err = k.l.locker.Renew(ctx, k.lease, keep)
		default:
			k.err = k.l.locker.Release(ctx, k.lease)
		}
	})
	return k.err
}

// Elector is a gocron.Elector: it campaigns in the background and answers
// IsLeader from the current term. Close it to resign.
type Elector struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	lead *elect.Leadership
	err  error // why campaigning stopped before Close, if it did
}

// ErrNotLeader is returned by IsLeader when this instance does not lead.
var ErrNotLeader = errors.New("gocronadapter: not the leader")

// NewElector campaigns in e until ctx ends or Close, again after each lost
// term. A nil ctx or e is an error matching aegis.ErrInvalid.
func NewElector(ctx context.Context, e *elect.Election) (*Elector, error) {
	switch {
	case ctx == nil:
		return nil, invalid("gocronadapter: NewElector: ctx is nil")
	case e == nil:
		return nil, invalid("gocronadapter: NewElector: election is nil")
	}
	ctx, cancel := context.WithCancel(ctx)
	el := &Elector{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(el.done)
		for ctx.Err() == nil {
			lead, err := e.Campaign(ctx)
			if err != nil {
				// Campaign returns only when ctx ended or on bad input (the
				// store refused the election's key or TTL): the second must
				// not look like an ordinary "not the leader" forever.
				if ctx.Err() == nil {
					el.mu.Lock()
					el.err = err
					el.mu.Unlock()
				}
				return
			}
			el.mu.Lock()
			el.lead = lead
			el.mu.Unlock()
			<-lead.Context().Done()
			_ = lead.Resign(context.WithoutCancel(ctx))
			el.mu.Lock()
			el.lead = nil
			el.mu.Unlock()
		}
	}()
	return el, nil
}

// IsLeader implements gocron.Elector: nil while this instance's term can
// be trusted (it checks the term's local deadline), ErrNotLeader otherwise.
// When campaigning stopped on an error (not ctx's end or Close), the error
// wraps ErrNotLeader and that error.
func (el *Elector) IsLeader(context.Context) error {
	el.mu.Lock()
	lead, err := el.lead, el.err
	el.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: campaigning stopped: %w", ErrNotLeader, err)
	}
	if lead == nil || lead.Err() != nil {
		return ErrNotLeader
	}
	return nil
}

// Leadership returns the current term, or nil: its Token fences the
// leader's writes.
func (el *Elector) Leadership() *elect.Leadership {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.lead
}

// Close stops campaigning, resigns a current term and waits.
func (el *Elector) Close() {
	el.cancel()
	<-el.done
}
