// Package tcpproxy is a loopback TCP proxy that a test or the lab puts
// between a client and a server to inject network faults while the server
// keeps running: drop every connection and refuse new ones (Cut), keep
// connections open and forward nothing (Stall, a partition without
// resets), add latency, or switch the server behind it (a failover the
// client does not see, as behind a virtual IP).
package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on a loopback port to an upstream
// address. Its methods are safe for concurrent use.
type Proxy struct {
	ln   net.Listener
	wg   sync.WaitGroup
	done chan struct{}
	once sync.Once

	mu       sync.Mutex
	upstream string
	latency  time.Duration
	state    state
	flow     chan struct{} // closed when a stall ends
	conns    map[*pair]struct{}
}

type state int

const (
	flowing state = iota
	cut
	stalled
)

// pair is one proxied connection: the client's and the upstream's side.
type pair struct{ client, server net.Conn }

func (p *pair) close() {
	_ = p.client.Close()
	_ = p.server.Close()
}

// New listens on a free loopback port and forwards each connection to
// upstream (host:port).
func New(upstream string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("tcpproxy: upstream %q: want host:port", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, done: make(chan struct{}), conns: map[*pair]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the proxy's address, 127.0.0.1:port, for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the address the proxy forwards new connections to.
func (p *Proxy) Upstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream
}

// SetUpstream forwards new connections to addr and drops the current ones,
// as a failover behind a virtual IP does.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	p.upstream = addr
	p.mu.Unlock()
	p.dropAll()
}

// SetLatency delays everything the client sends by d before it is
// forwarded, so each request-response round trip takes d longer. Zero
// removes the delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// Cut drops every connection and, until Heal, closes new ones as soon as
// they are accepted: the client sees its connections reset and refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.setLocked(cut)
	p.mu.Unlock()
	p.dropAll()
}

// Stall stops forwarding, in both directions, on every connection, old and
// new, until Heal: bytes sent meanwhile wait in the proxy, as they would in
// a partitioned network, and nothing is reset.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(stalled)
}

// Heal ends a Cut or a Stall: stalled bytes are delivered, new connections
// reach the upstream.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(flowing)
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == cut
}

func (p *Proxy) setLocked(s state) {
	if p.state == stalled && s != stalled {
		close(p.flow)
	}
	if s == stalled && p.state != stalled {
		p.flow = make(chan struct{})
	}
	p.state = s
}

// Close stops listening, drops every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.done)
		p.mu.Lock()
		p.setLocked(flowing) // release stalled pipes, which then fail on closed conns
		p.mu.Unlock()
		err = p.ln.Close()
		p.dropAll()
		p.wg.Wait()
	})
	return err
}

func (p *Proxy) dropAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*pair]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

func (p *Proxy) closed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.closed() {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // EMFILE and the like
			}
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *Proxy) serve(client net.Conn) {
	p.mu.Lock()
	upstream, refuse := p.upstream, p.state == cut
	p.mu.Unlock()
	if refuse || p.closed() {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &pair{client: client, server: server}
	p.mu.Lock()
	if p.state == cut || p.upstream != upstream || p.closed() {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { p.forward(server, client, true) })
	wg.Go(func() { p.forward(client, server, false) })
	wg.Wait()
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// waitFlow blocks while the proxy is stalled.
func (p *Proxy) waitFlow() {
	p.mu.Lock()
	s, flow := p.state, p.flow
	p.mu.Unlock()
	if s == stalled {
		select {
		case <-flow:
		case <-p.done:
		}
	}
}

// chunk is data read from the client, released for forwarding at due.
type chunk struct {
	b   []byte
	due time.Time
}

// forward copies src to dst, holding bytes while the proxy is stalled.
// Data from the client (delayed set) also waits for the proxy's latency,
// in order; a delay line keeps reading meanwhile, so the delay adds to
// each round trip once, not once per buffer. When either side fails it
// closes both.
func (p *Proxy) forward(dst, src net.Conn, delayed bool) {
	defer dst.Close()
	defer src.Close()
	if !delayed {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.waitFlow()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	line := make(chan chunk, 256)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(line)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.latency
				p.mu.Unlock()
				select {
				case line <- chunk{b: buf[:n], due: time.Now().Add(d)}:
				case <-p.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range line {
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
			}
		}
		p.waitFlow()
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close()
			break
		}
	}
	for range line { // let the reader finish
	}
	wg.Wait()
}
