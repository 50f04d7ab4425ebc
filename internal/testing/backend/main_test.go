package backend_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every client a backend opens is closed by its close function: no
// goroutine of a client outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
