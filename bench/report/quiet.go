package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// quiet waits until the machine is idle: the share of idle CPU time over a
// window (from /proc/stat) at least -idle, for at most -max. A load
// average lags by minutes (a command that just ended still shows); idle
// time over seconds says whether something runs now. It prints what it
// found, and goes on (exit 0) after -max with a warning, so that a report
// on a busy machine says so instead of not being made.
func quiet(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("quiet", flag.ContinueOnError)
	want := fs.Float64("idle", 0.9, "the idle share of CPU time to wait for")
	window := fs.Duration("window", 3*time.Second, "the window idle time is measured over")
	most := fs.Duration("max", 3*time.Minute, "the longest wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	deadline := time.Now().Add(*most)
	for {
		idle, err := idleShare(ctx, *window)
		if err != nil {
			return err
		}
		if idle >= *want {
			fmt.Fprintf(os.Stderr, "quiet: %.0f%% idle over %s (load average %s)\n", 100*idle, *window, loadavg())
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "quiet: WARNING only %.0f%% idle after waiting %s (load average %s): the figures that follow are from a busy machine\n", 100*idle, *most, loadavg())
			return nil
		}
		fmt.Fprintf(os.Stderr, "quiet: %.0f%% idle over %s, waiting for %.0f%%\n", 100*idle, *window, 100**want)
	}
}

// idleShare is the idle (and iowait) share of all CPUs' time over d.
func idleShare(ctx context.Context, d time.Duration) (float64, error) {
	idle0, total0, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	idle1, total1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if total1 <= total0 {
		return 0, errors.New("quiet: /proc/stat did not move")
	}
	return float64(idle1-idle0) / float64(total1-total0), nil
}

func cpuTimes() (idle, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("quiet: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("quiet: unexpected /proc/stat line %q", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("quiet: /proc/stat: %w", err)
		}
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return idle, total, nil
}
