package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kind names a kind of server.
type Kind string

// The kinds of server this package starts.
const (
	KindPostgres  Kind = "postgres"
	KindRedis     Kind = "redis"
	KindEtcd      Kind = "etcd"
	KindZooKeeper Kind = "zookeeper"
)

// Kinds lists every kind, in the order a [Set] starts and reports them.
var Kinds = []Kind{KindPostgres, KindRedis, KindEtcd, KindZooKeeper, KindNATS}

// ParseKind returns the kind named s ("postgres", "redis", "etcd",
// "zookeeper", "nats", "jaeger"; also "pg" and "zk").
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "postgres", "postgresql", "pg":
		return KindPostgres, nil
	case "redis":
		return KindRedis, nil
	case "etcd":
		return KindEtcd, nil
	case "zookeeper", "zk":
		return KindZooKeeper, nil
	case "nats":
		return KindNATS, nil
	case "jaeger":
		return KindJaeger, nil
	}
	return "", fmt.Errorf("servers: unknown server %q (want postgres, redis, etcd, zookeeper, nats or jaeger)", s)
}

const (
	pidFile   = "server.pid"
	stopGrace = 15 * time.Second // a graceful stop that takes longer gets SIGKILL
	killGrace = 10 * time.Second // how long a SIGKILLed process may take to go
	// adoptWait bounds the health check of a running server that a detached
	// start finds in its directory before it restarts it.
	adoptWait = 10 * time.Second
)

// errUnsupported is returned by Wipe for servers whose data cannot be wiped
// alone.
var errUnsupported = errors.New("not supported")

// Proc is one server process started (or adopted) by this package.
//
// Its methods are safe for concurrent use; lifecycle calls (Start, Stop,
// Kill, Restart, Wipe) are serialized. The zero Proc is not usable.
type Proc struct {
	kind    Kind
	name    string // "postgres", "redis-3", "etcd-1"
	dir     string // holds its pid file and log (and usually its data)
	addr    string // 127.0.0.1:port, where clients connect
	ports   []int  // every port it binds, the client port first
	detach  bool
	timeout time.Duration // readiness bound

	// command builds a fresh command for each start, after preparing the
	// directory (initdb, configuration files).
	command func(ctx context.Context) (*exec.Cmd, error)
	// afterReady runs after the first successful probe of each start.
	afterReady func(ctx context.Context) error
	// wipe deletes the data; nil means errUnsupported.
	wipe       func() error
	stopSignal syscall.Signal

	life sync.Mutex // serializes lifecycle calls

	mu      sync.Mutex
	pid     int
	started uint64        // start time of pid, to tell it from a reused pid
	done    chan struct{} // closed when our child exits; nil when adopted
	exitErr error
	logFrom int64 // log offset where the current run's output starts
	reused  bool
}

// Kind returns the kind of server.
func (p *Proc) Kind() Kind { return p.kind }

// Name returns the server's name, such as "postgres", "redis-2" or
// "etcd-1".
func (p *Proc) Name() string { return p.name }

// Addr returns the loopback host:port that clients connect to.
func (p *Proc) Addr() string { return p.addr }

// Port returns the client port.
func (p *Proc) Port() int { return p.ports[0] }

// Dir returns the directory that holds the server's pid file, log and data.
func (p *Proc) Dir() string { return p.dir }

// LogPath returns the path of the server's log (its standard output and
// error, appended across restarts).
func (p *Proc) LogPath() string { return filepath.Join(p.dir, string(p.kind)+".log") }

// Pid returns the process id of the server, or 0 when it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.aliveLocked() {
		return 0
	}
	return p.pid
}

// Running reports whether the process exists (it may be paused).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.aliveLocked()
}

// Reused reports whether the last start found this server already running
// from an earlier detached start and adopted it rather than starting it.
func (p *Proc) Reused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reused
}

// Start starts a stopped (or killed) server with the same ports and data
// and waits until it is ready, within the server's start timeout and ctx.
// It does nothing when the server is running. A cluster member is ready
// only when it serves, which needs a quorum of its cluster.
func (p *Proc) Start(ctx context.Context) error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.Running() {
		return nil
	}
	return p.start(ctx)
}

// Stop stops the server gracefully (SIGINT for PostgreSQL's fast shutdown,
// SIGTERM for the others; a paused server is resumed first) and waits until
// it has exited. A server still running after 15 s gets SIGKILL. Stopping a
// stopped server does nothing. Stop removes the pid file.
func (p *Proc) Stop() error {
	p.life.Lock()
	defer p.life.Unlock()
	return p.stop()
}

// Kill sends SIGKILL to the server's process group and to every process
// the server started (a PostgreSQL server's backends and background
// workers each lead a session of their own, outside its group), and waits
// until they have all exited: a crash of the whole server, after which it
// can start again at once (a PostgreSQL backend that outlived its
// postmaster would hold the shared memory and refuse the restart).
func (p *Proc) Kill() error {
	p.life.Lock()
	defer p.life.Unlock()
	if !p.Running() {
		return nil
	}
	// Stopped, the server forks no process that the snapshot would miss.
	p.signalGroup(syscall.SIGSTOP)
	_ = p.waitState(true)
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	children := descendants(pid)
	p.signalGroup(syscall.SIGKILL)
	for _, c := range children {
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
	}
	if !p.waitExit(killGrace) {
		return fmt.Errorf("servers: %s on %s (pid %d) still running %s after SIGKILL", p.name, p.addr, p.Pid(), killGrace)
	}
	deadline := time.Now().Add(killGrace)
	for _, c := range children {
		for c.alive() {
			if time.Now().After(deadline) {
				return fmt.Errorf("servers: %s on %s: its process %d still running %s after SIGKILL", p.name, p.addr, c.pid, killGrace)
			}
			time.Sleep(time.Millisecond)
		}
	}
	p.forget()
	return nil
}

// Pause stops the server's process group with SIGSTOP and returns once the
// kernel reports the server stopped: connections stay open and nothing
// answers, as in a long GC pause or a stalled VM.
func (p *Proc) Pause() error {
	if !p.Running() {
		return fmt.Errorf("servers: pause %s on %s: not running", p.name, p.addr)
	}
	p.signalGroup(syscall.SIGSTOP)
	return p.waitState(true)
}

// Resume continues a paused server with SIGCONT and returns once it runs.
func (p *Proc) Resume() error {
	if !p.Running() {
		return fmt.Errorf("servers: resume %s on %s: not running", p.name, p.addr)
	}
	p.signalGroup(syscall.SIGCONT)
	return p.waitState(false)
}

// waitState waits until the kernel reports the process stopped (or no
// longer stopped): signals are delivered asynchronously.
func (p *Proc) waitState(stopped bool) error {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if err := WaitStopped(context.Background(), pid, stopped, 5*time.Second); err != nil {
		return fmt.Errorf("servers: %s on %s: %w", p.name, p.addr, err)
	}
	return nil
}

// Restart stops the server (gracefully, as Stop) and starts it again on
// the same ports with the same data, waiting until it is ready. To restart
// with empty data, call Stop, Wipe, then Start.
func (p *Proc) Restart(ctx context.Context) error {
	p.life.Lock()
	defer p.life.Unlock()
	if err := p.stop(); err != nil {
		return err
	}
	return p.start(ctx)
}

// Wipe deletes the data of a stopped server; the next Start initializes it
// afresh (PostgreSQL runs initdb again, a ZooKeeper member resyncs from its
// ensemble). Redis keeps no data, so wiping it does nothing. An etcd member
// cannot be wiped alone (it would need to be removed from and added to the
// cluster): Wipe returns an error for it.
func (p *Proc) Wipe() error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.Running() {
		return fmt.Errorf("servers: wipe %s on %s: stop it first", p.name, p.addr)
	}
	if p.wipe == nil {
		return fmt.Errorf("servers: wipe %s: %w", p.name, errUnsupported)
	}
	return p.wipe()
}

// String returns "name addr".
func (p *Proc) String() string { return p.name + " " + p.addr }

// stop is Stop without the lock.
func (p *Proc) stop() error {
	if !p.Running() {
		p.forget()
		return nil
	}
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	_ = syscall.Kill(pid, p.stopSignal)
	p.signalGroup(syscall.SIGCONT) // a paused server must run to stop
	if !p.waitExit(stopGrace) {
		p.signalGroup(syscall.SIGKILL)
		if !p.waitExit(killGrace) {
			return fmt.Errorf("servers: stop %s on %s: pid %d still running after SIGKILL", p.name, p.addr, pid)
		}
	}
	p.forget()
	return nil
}

func (p *Proc) killQuietly() {
	if p.Running() {
		p.signalGroup(syscall.SIGKILL)
		p.waitExit(killGrace)
	}
	p.forget()
}

// forget drops the pid file of a process that has exited.
func (p *Proc) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 {
		return
	}
	if rec, err := readRecord(p.dir); err == nil && rec.Pid == p.pid {
		_ = os.Remove(filepath.Join(p.dir, pidFile))
	}
	p.pid = 0
}

// signalGroup signals the process group the server leads (we start every
// server as a group leader). Errors mean the group is gone.
func (p *Proc) signalGroup(sig syscall.Signal) {
	p.mu.Lock()
	pid := p.pid
	alive := p.aliveLocked()
	p.mu.Unlock()
	if alive && pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}

// waitExit waits up to d for the process to exit and reports whether it did.
func (p *Proc) waitExit(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	if done != nil {
		select {
		case <-done:
			return true
		case <-timer.C:
			return false
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for p.Running() {
		select {
		case <-tick.C:
		case <-timer.C:
			return !p.Running()
		}
	}
	return true
}

func (p *Proc) aliveLocked() bool {
	if p.pid == 0 {
		return false
	}
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
		}
		// Not reaped yet, but a process another handle stopped (StopDir) is
		// a zombie until this handle's Wait returns: that is not running.
	}
	state, started, err := processStat(p.pid)
	return err == nil && started == p.started && state != 'Z' && state != 'X'
}

// hostPort returns 127.0.0.1:port.
func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
