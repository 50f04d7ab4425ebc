package measure

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Subject is one thing a bench command measures: its name, for errors,
// and its operation.
type Subject struct {
	Name string
	Op   func(ctx context.Context, g int) error
}

// Tally is what the rounds of one subject added up to: the operations,
// their latencies, the time they took and this process's CPU time (user +
// system) while they ran.
type Tally struct {
	Rec     Recorder
	Ops     int
	Elapsed time.Duration
	CPU     time.Duration
}

// OpsPerSec is the tally's throughput.
func (t *Tally) OpsPerSec() float64 { return float64(t.Ops) / t.Elapsed.Seconds() }

// Rounds runs every subject at goroutines goroutines for d per round
// (with For), rounds times, the subjects' order rotating by one each
// round, so that load from elsewhere on the machine falls on all of them
// alike. A round cut short by ctx is an error, naming the subject.
func Rounds(ctx context.Context, subjects []Subject, goroutines, rounds int, d time.Duration) ([]Tally, error) {
	tallies := make([]Tally, len(subjects))
	for r := range rounds {
		for j := range subjects {
			i := (j + r) % len(subjects)
			c0 := ProcessCPU()
			k, took, err := For(ctx, goroutines, d, subjects[i].Op, &tallies[i].Rec)
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return nil, fmt.Errorf("%s, %d goroutines: %w", subjects[i].Name, goroutines, err)
			}
			tallies[i].CPU += ProcessCPU() - c0
			tallies[i].Ops += k
			tallies[i].Elapsed += took
		}
	}
	return tallies, nil
}

// ProcessCPU is this process's CPU time so far, user + system (0 when
// the system cannot say).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ParseCounts parses a -goroutines flag: positive counts, comma-separated
// (empty: none).
func ParseCounts(s string) ([]int, error) {
	var counts []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-goroutines: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// Loadavg is /proc/loadavg without its newline, or why it is unknown.
func Loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}
