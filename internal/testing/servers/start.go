package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

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
