package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// memProbe measures how fast this machine walks memory it cannot cache:
// a chain of dependent loads through 128 MB, in short bursts on a thread
// of its own, counted per second of that thread's CPU time (so waiting for
// a core does not count, only how fast the core runs once it has one). On
// a virtual machine this moves with what other tenants of the host do to
// its caches and memory bus; the soak's PostgreSQL work, which is mostly
// loads from shared buffers, moves with it.
type memProbe struct {
	mu     sync.Mutex
	loads  float64       // since the last take
	cpu    time.Duration // the probe thread's CPU time for them
	cancel context.CancelFunc
	done   chan struct{}
}

const (
	probeWords = 16 << 20 // 128 MB of uint64
	probeBurst = 50_000   // dependent loads per burst (about 12 ms)
	probeGap   = 500 * time.Millisecond
)

// startProbe starts the probe. Its cost is one burst every probeGap: about
// 2 % of a core.
func startProbe(ctx context.Context) *memProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &memProbe{cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(p.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		chain := make([]uint64, probeWords)
		for i := range chain {
			chain[i] = uint64(i) * 2654435761 % probeWords // a permutation: 2654435761 is odd
		}
		close(ready)
		idx := uint64(1)
		t := time.NewTicker(probeGap)
		defer t.Stop()
		for {
			c0 := threadCPU()
			for i := uint64(0); i < probeBurst; i++ {
				idx = (chain[idx] ^ i) % probeWords
			}
			used := threadCPU() - c0
			p.mu.Lock()
			p.loads += probeBurst
			p.cpu += used
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				if idx == math.MaxUint64 { // keep the loop's result alive
					fmt.Fprintln(os.Stderr, idx)
				}
				return
			case <-t.C:
			}
		}
	}()
	<-ready
	return p
}

// take returns the probe's speed since the last take, in millions of
// loads per CPU-second (0 before its first burst).
func (p *memProbe) take() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	speed := 0.0
	if p.cpu > 0 {
		speed = p.loads / p.cpu.Seconds() / 1e6
	}
	p.loads, p.cpu = 0, 0
	return speed
}

func (p *memProbe) stop() {
	p.cancel()
	<-p.done
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// correlation is Pearson's r of x and y (0 when either is constant).
func correlation(x, y []float64) float64 {
	n := min(len(x), len(y))
	if n < 2 {
		return 0
	}
	var mx, my float64
	for i := range n {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/float64(n), my/float64(n)
	var sxy, sxx, syy float64
	for i := range n {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}

// probeAlone runs the probe with nothing else for d, one line per window:
// how much the machine's memory speed moves by itself.
func probeAlone(ctx context.Context, d, window time.Duration) error {
	p := startProbe(ctx)
	defer p.stop()
	var speeds []float64
	t := time.NewTicker(window)
	defer t.Stop()
	end := time.After(d)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			median, dev := medianDev(speeds)
			fmt.Printf("memory probe alone, %d windows of %s: median %.2f M loads per CPU-second, worst window %.1f%% from the median; load average at end %s\n",
				len(speeds), window, median, dev, loadavgFull())
			return nil
		case <-t.C:
			s := p.take()
			speeds = append(speeds, s)
			fmt.Fprintf(os.Stderr, "window %3d: memory probe %.2f M loads per CPU-second; load %s\n", len(speeds), s, loadavg())
		}
	}
}
