package servers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
var Kinds = []Kind{KindPostgres, KindRedis, KindEtcd, KindZooKeeper}

// ParseKind returns the kind named s ("postgres", "redis", "etcd",
// "zookeeper"; also "pg" and "zk").
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
	}
	return "", fmt.Errorf("servers: unknown server %q (want postgres, redis, etcd or zookeeper)", s)
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		state, _, err := processStat(pid)
		if err != nil || (state == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("servers: %s on %s (pid %d): still in state %c after SIGSTOP/SIGCONT", p.name, p.addr, pid, state)
		}
		time.Sleep(time.Millisecond)
	}
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

// start launches the process and waits until it is ready; on failure it
// kills what it launched. The caller holds p.life.
func (p *Proc) start(ctx context.Context) error {
	if err := p.launch(ctx); err != nil {
		return err
	}
	if err := p.ready(ctx, p.timeout); err != nil {
		p.killQuietly()
		return err
	}
	return nil
}

// launch starts the process without waiting for it to be ready.
func (p *Proc) launch(ctx context.Context) error {
	if rec, err := readRecord(p.dir); err == nil && rec.alive() {
		return fmt.Errorf("servers: %s: %s is already running from %s (pid %d); stop it with `aegis services stop --dir %s`",
			p.name, rec.Addr, p.dir, rec.Pid, filepath.Dir(p.dir))
	}
	for _, port := range p.ports {
		if err := checkPortFree(port); err != nil {
			return fmt.Errorf("servers: start %s: %w", p.name, err)
		}
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fmt.Errorf("servers: start %s: %w", p.name, err)
	}
	cmd, err := p.command(ctx)
	if err != nil {
		return fmt.Errorf("servers: start %s on %s: %w", p.name, p.addr, err)
	}
	logf, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("servers: start %s: %w", p.name, err)
	}
	defer logf.Close()
	offset, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "--- aegis: %s starting %s on %s: %s\n", time.Now().Format(time.RFC3339), p.name, p.addr, strings.Join(cmd.Args, " "))

	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if p.detach {
		cmd.SysProcAttr.Setsid = true // outlives us, away from our terminal
	} else {
		// Its own process group, so a Ctrl-C at our terminal reaches only
		// us (and we stop it in order), and SIGKILL when we die.
		cmd.SysProcAttr.Setpgid = true
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("servers: start %s on %s: %w", p.name, p.addr, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.pid = cmd.Process.Pid
	p.started, _ = processStart(p.pid)
	p.done = done
	p.exitErr = nil
	p.logFrom = offset
	p.reused = false
	rec := p.recordLocked()
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	if err := writeRecord(p.dir, rec); err != nil {
		p.killQuietly()
		return fmt.Errorf("servers: start %s: %w", p.name, err)
	}
	return nil
}

// adopt takes over a server left running in p.dir by an earlier detached
// start, when it is ours (same kind and address). It reports whether it
// did. A live process with another address is stopped.
func (p *Proc) adopt() bool {
	rec, err := readRecord(p.dir)
	if err != nil {
		return false
	}
	if !rec.alive() {
		_ = os.Remove(filepath.Join(p.dir, pidFile))
		return false
	}
	p.mu.Lock()
	p.pid, p.started, p.done, p.exitErr, p.logFrom = rec.Pid, rec.Started, nil, nil, 0
	if fi, err := os.Stat(p.LogPath()); err == nil {
		p.logFrom = max(0, fi.Size()-8192)
	}
	p.mu.Unlock()
	if rec.Kind != p.kind || rec.Addr != p.addr {
		_ = p.stop()
		return false
	}
	p.mu.Lock()
	p.reused = true
	p.mu.Unlock()
	return true
}

// startOrAdopt is the start of a detached server: adopt a healthy one that
// is already running, otherwise start it.
func (p *Proc) startOrAdopt(ctx context.Context) error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.detach && p.adopt() {
		if err := p.ready(ctx, adoptWait); err == nil {
			return nil
		}
		if err := p.stop(); err != nil {
			return err
		}
	}
	return p.start(ctx)
}

// ready waits until the probe succeeds, the process exits, or the bound
// passes. It runs afterReady once the probe succeeds.
func (p *Proc) ready(outer context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(outer, bound)
	defer cancel()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	delay := 10 * time.Millisecond
	var last error
	for {
		if !p.Running() {
			p.mu.Lock()
			err := p.exitErr
			p.mu.Unlock()
			if err == nil {
				err = errors.New("exited")
			}
			return p.failure(fmt.Errorf("exited while starting: %w", err))
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		last = probe(pctx, p.kind, p.addr)
		pcancel()
		if last == nil {
			if p.afterReady != nil {
				if err := p.afterReady(ctx); err != nil {
					return p.failure(err)
				}
			}
			return nil
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			if err := outer.Err(); err != nil {
				return p.failure(fmt.Errorf("not ready: %w (last check: %w)", err, last))
			}
			return p.failure(fmt.Errorf("not ready after %s: %w", bound, last))
		case <-done: // nil for adopted servers: never ready
			timer.Stop()
		case <-timer.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// StartError is the error of a server that did not become ready. Its
// message names the server, its address and pid, and quotes the end of its
// log.
type StartError struct {
	Name    string
	Addr    string
	Pid     int
	LogPath string
	LogTail string // the last lines the server wrote during this start
	Err     error
}

func (e *StartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "servers: %s on %s", e.Name, e.Addr)
	if e.Pid != 0 {
		fmt.Fprintf(&b, " (pid %d)", e.Pid)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.LogTail != "" {
		fmt.Fprintf(&b, "\n--- last lines of %s:\n%s", e.LogPath, strings.TrimRight(e.LogTail, "\n"))
	} else {
		fmt.Fprintf(&b, " (log %s is empty)", e.LogPath)
	}
	return b.String()
}

func (e *StartError) Unwrap() error { return e.Err }

func (p *Proc) failure(err error) error {
	p.mu.Lock()
	pid, from := p.pid, p.logFrom
	p.mu.Unlock()
	return &StartError{Name: p.name, Addr: p.addr, Pid: pid, LogPath: p.LogPath(), LogTail: logTail(p.LogPath(), from, 25), Err: err}
}

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

func (p *Proc) recordLocked() record {
	return record{Kind: p.kind, Name: p.name, Addr: p.addr, Pid: p.pid, Started: p.started, Log: p.LogPath()}
}

// record is the content of a pid file: enough to find, check, stop and
// probe a server from another process.
type record struct {
	Kind    Kind   `json:"kind"`
	Name    string `json:"name"`
	Addr    string `json:"addr"`
	Pid     int    `json:"pid"`
	Started uint64 `json:"started"` // /proc/PID/stat starttime, to detect pid reuse
	Log     string `json:"log"`
	dir     string
}

func (r record) alive() bool {
	state, started, err := processStat(r.Pid)
	return err == nil && started == r.Started && state != 'Z' && state != 'X'
}

func (r record) paused() bool {
	state, _, err := processStat(r.Pid)
	return err == nil && state == 'T'
}

func readRecord(dir string) (record, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("servers: bad pid file %s: %w", filepath.Join(dir, pidFile), err)
	}
	r.dir = dir
	return r, nil
}

func writeRecord(dir string, r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, pidFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, pidFile))
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

// logTail returns the last n lines of the log written after offset from.
func logTail(path string, from int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	const window = 64 << 10
	start := max(from, fi.Size()-window)
	b := make([]byte, fi.Size()-start)
	if _, err := f.ReadAt(b, start); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// isPortConflict reports whether a start failed because a port was taken.
func isPortConflict(err error) bool {
	if errors.Is(err, errPortInUse) {
		return true
	}
	var se *StartError
	return errors.As(err, &se) && strings.Contains(strings.ToLower(se.LogTail), "address already in use")
}

// hostPort returns 127.0.0.1:port.
func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
