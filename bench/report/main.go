// Command report makes the performance report of `make bench-report`: the
// lease scale curves of every backend, and the stitching of every bench
// command's Markdown fragment into docs/performance.md and the README.
//
//	go run ./report curves [-goroutines 1,4,16,64,256] [-round 1s] [-rounds 2] [-md FILE] [-png DIR]
//	go run ./report machine -md FILE
//	go run ./report stitch -in DIR [-loaded DIR] -readme ../README.md -doc ../docs/performance.md
//	go run ./report hog -for 10m
//	go run ./report quiet [-idle 0.9] [-max 3m]
//
// Curves measure TryAcquire then Release of a free key (a key per
// goroutine) on each backend of internal/testing/backend, the same operation
// as `aegis bench lease`, at each goroutine count; rounds rotate the
// backends' order so that load from elsewhere falls on all alike. Hog
// keeps every core busy (the "loaded" pass of `make bench-report-loaded`).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

var commands = map[string]func(ctx context.Context, args []string) error{
	"curves":  curves,
	"machine": machine,
	"stitch":  stitch,
	"hog":     hog,
	"quiet":   quiet,
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("missing command: curves, machine, stitch, hog or quiet")
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q (known: curves, machine, stitch, hog, quiet)", args[0])
	}
	return cmd(ctx, args[1:])
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
