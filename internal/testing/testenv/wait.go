package testenv

import (
	"sync"
	"testing"
	"time"
)

// Recv waits at most d for a value from ch; the test fails, naming what it
// waited for, when none comes. Tests use it instead of a bare receive, which
// hangs until the package's timeout when the value never comes.
func Recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("waited %s for %s", d, what)
		var zero T
		return zero
	}
}

// Wait waits at most d for wg; the test fails, naming what it waited for.
func Wait(t testing.TB, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	Recv(t, done, d, what)
}
