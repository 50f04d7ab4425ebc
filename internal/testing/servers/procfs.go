package servers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// process is a pid with its start time, to tell it from a reused pid.
type process struct {
	pid     int
	started uint64
}

// alive reports whether the process still runs (a zombie does not: it
// has released everything but its exit status).
func (c process) alive() bool {
	state, started, err := processStat(c.pid)
	return err == nil && started == c.started && state != 'Z' && state != 'X'
}

// descendants returns the processes below pid (its children, theirs...),
// from /proc.
func descendants(pid int) []process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]process{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, started, err := processParent(n)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], process{n, started})
	}
	var out []process
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
		queue = queue[1:]
	}
	return out
}

// processStat reads the state letter and the start time (clock ticks after
// boot) of pid from /proc.
func processStat(pid int) (state byte, started uint64, err error) {
	if pid <= 0 {
		return 0, 0, errors.New("no pid")
	}
	f, err := statFields("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	started, err = strconv.ParseUint(f[19], 10, 64) // field 22
	return f[0][0], started, err
}

// statFields reads a /proc stat file ("pid (comm) S ppid …") and returns
// its fields after comm, from the state (field 3) on: comm may hold
// spaces and parentheses.
func statFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, errors.New("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, errors.New("bad /proc stat")
	}
	return f, nil
}

// WaitStopped waits, within bound, until every thread of pid is stopped
// (stopped true) or until one of them runs again (stopped false): kill(2)
// returns before a SIGSTOP or SIGCONT takes effect, and a process's
// threads stop one by one, so a process whose main thread reads stopped
// may still run (and write) on another. A process that is gone ends the
// wait without an error.
func WaitStopped(ctx context.Context, pid int, stopped bool, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		all, gone, err := threadsStopped(pid)
		if err != nil || gone || all == stopped {
			return err
		}
		if time.Now().After(deadline) {
			if stopped {
				return fmt.Errorf("pid %d: not every thread stopped %s after SIGSTOP", pid, bound)
			}
			return fmt.Errorf("pid %d: still stopped %s after SIGCONT", pid, bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// threadsStopped reports whether every thread of pid is stopped (state T
// or t, or ended), and whether pid is gone.
func threadsStopped(pid int) (stopped, gone bool, err error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, true, nil
	}
	if err != nil {
		return false, false, err
	}
	for _, task := range tasks {
		f, err := statFields(filepath.Join(dir, task.Name(), "stat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return false, false, fmt.Errorf("%s/%s/stat: %w", dir, task.Name(), err)
		}
		switch f[0][0] {
		case 'T', 't', 'Z', 'X':
		default:
			return false, false, nil
		}
	}
	return true, false, nil
}

// processParent reads the parent pid and the start time of pid from
// /proc.
func processParent(pid int) (ppid int, started uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, errors.New("bad /proc stat")
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil { // field 4
		return 0, 0, err
	}
	started, err = strconv.ParseUint(f[19], 10, 64)
	return ppid, started, err
}

func processStart(pid int) (uint64, error) {
	_, started, err := processStat(pid)
	return started, err
}
