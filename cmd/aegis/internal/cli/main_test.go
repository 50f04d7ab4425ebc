package cli

import (
	"context"
	"os"
	"testing"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/node"

	"go.uber.org/goleak"
)

// TestMain makes this test binary an aegis node when the lab of a test
// starts it as one (the lab runs its own executable with `node`).
func TestMain(m *testing.M) {
	if os.Getenv("AEGISLAB_TEST_NODE") == "1" && len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(node.NodeMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Setenv("AEGISLAB_TEST_NODE", "1") // inherited by the nodes the tests' labs start
	goleak.VerifyTestMain(m)
}
