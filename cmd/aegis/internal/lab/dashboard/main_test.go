package dashboard_test

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/node"

	"go.uber.org/goleak"
)

// nodeEnv makes this test binary a lab node: the lab runs its own
// executable with `node` and the run's flags, as the aegis command does.
const nodeEnv = "AEGISLAB_TEST_NODE=1"

// parallel is how many of this package's tests run at once unless
// -test.parallel says otherwise: a lab run mostly waits for its ticks.
const parallel = "6"

func TestMain(m *testing.M) {
	if os.Getenv("AEGISLAB_TEST_NODE") == "1" && len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(node.NodeMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	// A race-detecting binary sleeps a second before it exits (the race
	// runtime's atexit_sleep_ms): every node of every run would, and the
	// runs wait for their nodes to exit.
	if os.Getenv("GORACE") == "" {
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", parallel)
	}
	goleak.VerifyTestMain(m)
}
