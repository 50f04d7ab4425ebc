package servers

import (
	"errors"
	"os"
	"strconv"
	"strings"
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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, errors.New("bad /proc stat")
	}
	started, err = strconv.ParseUint(f[19], 10, 64) // field 22
	return f[0][0], started, err
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
