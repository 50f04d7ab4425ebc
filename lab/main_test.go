package lab_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/aegislab/aegis/lab"
)

// nodeEnv makes this test binary a lab node: the lab runs its own
// executable with `node` and these flags, as the aegis command does.
const nodeEnv = "AEGISLAB_TEST_NODE=1"

func TestMain(m *testing.M) {
	if os.Getenv("AEGISLAB_TEST_NODE") == "1" && len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(lab.NodeMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
