// Package locktest is the conformance suite every aegis.Locker passes.
//
// A backend runs it once, against a real store:
//
//	func TestLocktest(t *testing.T) {
//		locktest.Run(t, locktest.Config{
//			New: func(t *testing.T) aegis.Locker { return newLocker(t) },
//		})
//	}
//
// New is called several times per test, and each call must return a
// separate Locker instance on the same store, as two processes would have:
// the suite checks that exclusion and token order hold across instances, not
// only inside one. Every test uses keys of its own, so the suite can share a
// store with other tests running in parallel.
//
// Timing is relative to Config.TTL, so a backend with a coarse lease (etcd's
// whole seconds, a ZooKeeper session) runs the same suite at its own scale.
// Waits are bounded polls, never fixed sleeps.
package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aegislab/aegis"
)

// Config describes the Locker under test.
type Config struct {
	// New returns a new, separate Locker instance on the store under test.
	// Required. Cleanup belongs in t.Cleanup.
	New func(t *testing.T) aegis.Locker
	// TTL is the suite's unit of time: the TTL of most leases it takes.
	// Default 1s. Set it to the backend's smallest dependable TTL or more.
	TTL time.Duration
	// MaxTTL is the longest TTL the backend accepts. Default aegis.MaxTTL.
	MaxTTL time.Duration
	// Workers is the number of Locker instances in the concurrency test,
	// each run by two goroutines. Default 4.
	Workers int
	// Increments is how many critical sections each goroutine of the
	// concurrency test runs. Default 10.
	Increments int
	// Handoff bounds how long a waiter blocked in aegis.Acquire may be kept
	// out by a greedy holder that releases and at once acquires again.
	// Default TTL + 1s: a fair backend hands over within one hold.
	Handoff time.Duration
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = time.Second
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = aegis.MaxTTL
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Increments <= 0 {
		c.Increments = 10
	}
	if c.Handoff <= 0 {
		c.Handoff = c.TTL + time.Second
	}
	return c
}

// Run runs the suite as parallel subtests of t.
func Run(t *testing.T, cfg Config) {
	if cfg.New == nil {
		t.Fatal("locktest: Config.New is required")
	}
	s := &suite{cfg: cfg.withDefaults()}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Exclusive", s.exclusive},
		{"IndependentKeys", s.independentKeys},
		{"ReacquireAfterRelease", s.reacquireAfterRelease},
		{"TokensIncreaseAcrossInstances", s.tokensIncrease},
		{"ExpiryAndTakeover", s.expiryAndTakeover},
		{"StaleOwnerChangesNothing", s.staleOwner},
		{"ForgedLeaseChangesNothing", s.forgedLease},
		{"ReleasedLeaseIsGone", s.releasedLeaseIsGone},
		{"StaleAfterOwnRelease", s.staleAfterOwnRelease},
		{"StaleAfterSuccessor", s.staleAfterSuccessor},
		{"StaleAfterExpiry", s.staleAfterExpiry},
		{"LeaseNeverPrintsOwner", s.ownerHidden},
		{"WaiterBeatsGreedyHolder", s.greedyHolder},
		{"WaiterLeavesNothingBehind", s.waiterLeaves},
		{"RenewExtendsPastTTL", s.renewExtends},
		{"LockAtLeastForThroughRenew", s.lockAtLeastFor},
		{"ConcurrentCounter", s.concurrentCounter},
		{"Validation", s.validation},
		{"CancelledContext", s.cancelledContext},
		{"AcquireWaitsForRelease", s.acquireWaits},
		{"AcquireGivesUpWithContext", s.acquireGivesUp},
		{"HoldRenews", s.holdRenews},
		{"HoldCancelsBeforeSuccessor", s.holdCancelsBeforeSuccessor},
		{"HoldReleaseIsIdempotent", s.holdReleaseIdempotent},
		{"HoldReleasesWhenParentEnds", s.holdParentCancel},
		{"HoldReleaseAfterKeepsLease", s.holdReleaseAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t)
		})
	}
}

type suite struct {
	cfg Config
}

// key returns a key no other test uses.
func key(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "locktest/" + hex.EncodeToString(b[:])
}

// ctx returns a context that ends with the test, bounded so a hung backend
// fails the test instead of the whole run.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*s.cfg.TTL+30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// bound is how long the suite waits for anything that should happen within
// a few TTLs.
func (s *suite) bound() time.Duration { return 10*s.cfg.TTL + 5*time.Second }

// poll is the interval of bounded polls: fine enough to observe a takeover
// close to the moment it becomes possible.
func (s *suite) poll() time.Duration { return max(s.cfg.TTL/50, time.Millisecond) }
