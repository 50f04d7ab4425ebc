package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// replicas are the demo's three replica processes (this program, run with
// NIGHTLY_REPLICA set) and the events they print, one JSON line each.
type replicas struct {
	cmds    []*exec.Cmd
	byName  map[string]*exec.Cmd
	stdins  []io.WriteCloser
	events  chan line
	readers sync.WaitGroup
}

func newReplicas() *replicas {
	return &replicas{byName: map[string]*exec.Cmd{}, events: make(chan line, 256)}
}

// start starts replica-1, replica-2 and replica-3 on replicaURL.
func (r *replicas) start(ctx context.Context, replicaURL string, o options) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("replica-%d", i)
		cmd := exec.CommandContext(ctx, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "NIGHTLY_REPLICA="+name, "NIGHTLY_POSTGRES="+replicaURL,
			"NIGHTLY_WORK="+o.work.String(), "NIGHTLY_FENCE="+strconv.FormatBool(o.fenced))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		r.cmds = append(r.cmds, cmd)
		r.stdins = append(r.stdins, stdin)
		r.byName[name] = cmd
		r.readers.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var l line
				if json.Unmarshal(sc.Bytes(), &l) == nil {
					r.events <- l
				}
			}
		})
	}
	return nil
}

// stop ends the replicas (SIGCONT for a paused one, then SIGTERM; SIGKILL
// after 10s) and waits for them and their readers.
func (r *replicas) stop() {
	for _, c := range r.cmds {
		_ = c.Process.Signal(syscall.SIGCONT)
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range r.cmds {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
	r.readers.Wait()
}

// awaitReady waits until every replica is connected and has its
// scheduler's store.
func (r *replicas) awaitReady(ctx context.Context, tl *timeline) error {
	// The fire time is set once every replica is connected and has its
	// scheduler's store: set before, a replica slow to start (a cold
	// machine) would bind the job after the fire time and skip the
	// night, and with all three the story would never begin.
	ready := 0
	startBy := time.After(60 * time.Second)
	for ready < len(r.cmds) {
		select {
		case l := <-r.events:
			switch l.Kind {
			case "error":
				return fmt.Errorf("%s: %s", l.Node, l.Text)
			case "ready":
				tl.say(l.Node, "started (pid %s)", l.Text)
				ready++
			}
		case <-startBy:
			return fmt.Errorf("only %d of the 3 replicas were ready within 60s", ready)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// scheduleNightly tells every replica the job's time of day: the next
// whole second at least a second from now.
func (r *replicas) scheduleNightly(tl *timeline) error {
	// Nightly at this time of day (UTC), on the next whole second at
	// least a second from now: every replica computes the same instant
	// from the offset.
	fire := time.Now().Add(2 * time.Second).Truncate(time.Second)
	offset := fire.Sub(fire.Truncate(24 * time.Hour))
	tl.say("demo", "nightly-reconciliation runs daily at %s UTC, next at %s", fire.UTC().Format("15:04:05"), fire.UTC().Format(time.RFC3339))
	for _, w := range r.stdins {
		if _, err := fmt.Fprintln(w, offset); err != nil {
			return fmt.Errorf("tell a replica the schedule: %w", err)
		}
	}
	return nil
}
