package losstest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// Contend runs goroutines goroutines of one Locker, rounds times each:
// acquire, renew and release a key of its own, then take the key "shared"
// with aegis.Acquire and guard a read-modify-write of a counter with it.
// Calls of one Locker that travel together (redislease's and redlock's
// coalesced pipelines) must keep every lease apart: it fails on any call's
// error, on a token of "shared" not above the one before, and on a lost
// increment (the counter is not atomic: -race sees an overlap too).
// The run must end within within.
func Contend(t *testing.T, l aegis.Locker, goroutines, rounds int, within time.Duration) {
	t.Helper()
	var (
		counter int
		last    aegis.Token
		mu      sync.Mutex // guards last only, to check the tokens' order
		wg      sync.WaitGroup
		errs    = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			if err := contendRounds(t, l, fmt.Sprint("own-", g), rounds, func(lease *aegis.Lease) error {
				v := counter
				mu.Lock()
				if lease.Token <= last {
					mu.Unlock()
					return fmt.Errorf("token %d after %d", lease.Token, last)
				}
				last = lease.Token
				mu.Unlock()
				counter = v + 1
				return nil
			}); err != nil {
				errs <- err
			}
		})
	}
	testenv.Wait(t, &wg, within, "the contending goroutines")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, goroutines*rounds, counter, "increments made under the shared lease")
}

// contendRounds is one goroutine of Contend: guarded runs under the shared
// lease, after calls on the key own.
func contendRounds(t *testing.T, l aegis.Locker, own string, rounds int, guarded func(*aegis.Lease) error) error {
	ctx := t.Context()
	for range rounds {
		lo, err := l.TryAcquire(ctx, own, time.Minute)
		if err == nil {
			err = l.Renew(ctx, lo, time.Minute)
		}
		if err == nil {
			err = l.Release(ctx, lo)
		}
		if err != nil {
			return fmt.Errorf("key %s: %w", own, err)
		}
		lease, err := aegis.Acquire(ctx, l, "shared", time.Minute)
		if err != nil {
			return err
		}
		if err := guarded(lease); err != nil {
			return err
		}
		if err := l.Release(ctx, lease); err != nil {
			return err
		}
	}
	return nil
}
