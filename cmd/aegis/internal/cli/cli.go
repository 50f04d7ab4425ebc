// Package cli is the aegis command line: [Main] dispatches to one
// subcommand per file (services.go, and later lab.go, bench.go, node.go,
// inspect.go), each parsing its own flags with the standard flag package.
//
// Exit codes: 0 on success (and for -h), 1 when a command fails, 2 for a
// usage error: an unknown subcommand or flag, or bad arguments; 3 when
// `aegis lab run` ran but a run is inconclusive (its report says why).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one subcommand of aegis.
type command struct {
	name    string
	summary string // one line for `aegis help`
	// run runs the command with the arguments after its name. It returns
	// a usageError (exit 2), errFlagsReported (exit 2), flag.ErrHelp
	// (exit 0) or another error (exit 1, printed by Main).
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// usageError is a mistake in the command line: Main prints it with a hint
// and exits with 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError is a failure with an exit status of its own (not 1): Main
// prints it like any error and exits with code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// errFlagsReported is returned when the flag package has already printed
// the error and the usage.
var errFlagsReported = errors.New("bad flags")

// Main runs the aegis command line with args, the arguments after the
// program name, and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printHelp(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			c := lookup(rest[0])
			if c == nil {
				fmt.Fprintf(stderr, "aegis help: unknown command %q\nRun 'aegis help' for the list of commands.\n", rest[0])
				return 2
			}
			_ = c.run(ctx, []string{"-h"}, stdout, stdout)
			return 0
		}
		printHelp(stdout)
		return 0
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "aegis: unknown command %q\nRun 'aegis help' for the list of commands.\n", name)
		return 2
	}
	err := c.run(ctx, rest, stdout, stderr)
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagsReported):
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "aegis %s: %s\nRun 'aegis help %s' for usage.\n", c.name, ue.msg, c.name)
		return 2
	case errors.As(err, &ee):
		fmt.Fprintf(stderr, "aegis %s: %s\n", c.name, ee.err)
		return ee.code
	default:
		// A package's error that begins with the command's name ("lab:
		// ..." from package lab) would read "aegis lab: lab: ...".
		fmt.Fprintf(stderr, "aegis %s: %s\n", c.name, strings.TrimPrefix(err.Error(), c.name+": "))
		return 1
	}
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, "Aegis is fenced coordination: leases with fencing tokens, a fenced job queue,\na single-runner scheduler, and the lab that shows which strategies lose data.\n\nUsage:\n\n\taegis <command> [arguments]\n\nThe commands are:\n\n")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "\t%s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprint(w, "\nRun 'aegis help <command>' for more about a command.\n")
}

// flagSet is a flag.FlagSet that reports errors instead of exiting: a bad
// flag prints the error and the command's synopsis (exit 2), -h prints the
// whole usage and the flags' defaults (exit 0).
type flagSet struct {
	*flag.FlagSet
	name   string
	usage  string
	stderr io.Writer
}

func newFlagSet(name string, stderr io.Writer, usage string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("aegis "+name, flag.ContinueOnError), name: name, usage: strings.TrimSpace(usage), stderr: stderr}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		synopsis, _, _ := strings.Cut(fs.usage, "\n")
		fmt.Fprintf(stderr, "%s\nRun 'aegis help %s' for usage.\n", synopsis, fs.name)
	}
	return fs
}

// parse parses args, translating the flag package's errors into Main's.
func (fs *flagSet) parse(args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(fs.stderr, fs.usage)
		var flags strings.Builder
		fs.SetOutput(&flags)
		fs.PrintDefaults()
		fs.SetOutput(fs.stderr)
		if flags.Len() > 0 {
			fmt.Fprintf(fs.stderr, "\nFlags:\n%s", flags.String())
		}
		return flag.ErrHelp
	default:
		return errFlagsReported
	}
}
