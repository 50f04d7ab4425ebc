package runner_test

import (
	"context"
	"flag"
	"io"
	"os"
	"slices"
	"testing"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/node"

	"go.uber.org/goleak"
)

// nodeEnv makes this test binary a lab node: the lab runs its own
// executable with `node` and these flags, as the aegis command does.
const nodeEnv = "AEGISLAB_TEST_NODE=1"

// restartHangs, set to 1 in a node's environment, makes every process of
// a node after its first hang before it is ready: a restart that lasts
// until the run stops.
const restartHangs = "AEGISLAB_TEST_RESTART_HANGS"

// labParallel is how many of this package's tests run at once unless
// -test.parallel says otherwise. A lab run mostly waits for its ticks (its
// node processes sleep), so more runs than cores fit; the default of
// GOMAXPROCS (2 here) would make the package last a minute and a half.
const labParallel = "6"

func TestMain(m *testing.M) {
	if os.Getenv("AEGISLAB_TEST_NODE") == "1" && len(os.Args) > 1 && os.Args[1] == "node" {
		if os.Getenv(restartHangs) == "1" && !slices.Contains(os.Args, "--incarnation=1") {
			// Started again after a kill, it is never ready: it waits for
			// the lab to stop it (its standard input closed).
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(1)
		}
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
		_ = flag.Set("test.parallel", labParallel)
	}
	goleak.VerifyTestMain(m)
}
