package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/node"
)

var nodeCommand = command{
	name:    "node",
	summary: "one node of a lab run (started by aegis lab, not by hand)",
	run:     runNode,
}

const nodeUsage = `usage: aegis node --run ID --node N --strategy S [flags]

Node is one node process of a lab run. The lab starts it from its own
executable with the run's flags and the servers' addresses (its proxies) in
the AEGIS_* variables, writes the start time on its standard input, and
reads its events, one JSON object a line, from its standard output.`

func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stderr, nodeUsage)
		return flag.ErrHelp
	}
	switch code := node.NodeMain(ctx, args, os.Stdin, stdout, stderr); code {
	case 0:
		return nil
	case 2:
		return errFlagsReported
	default:
		return errors.New("node failed")
	}
}
