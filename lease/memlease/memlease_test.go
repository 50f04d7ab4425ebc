package memlease_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLocktest(t *testing.T) {
	t.Parallel()
	shared := memlease.New()
	locktest.Run(t, locktest.Config{
		// One store, as processes share a database; memlease's store is
		// the Locker itself, so every "instance" is the same value.
		New: func(*testing.T) aegis.Locker { return shared },
		TTL: 200 * time.Millisecond,
	})
}
