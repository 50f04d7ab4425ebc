// Package tcpproxy is a TCP proxy for tests that cut a client off from its
// servers while the servers keep running: the client connects to the
// proxy's loopback address, the proxy forwards to the target, and a test
// can drop every connection and refuse new ones (Cut), or keep connections
// open and forward nothing (Stall, a partition without resets), until Heal.
package tcpproxy

import (
	"net"
	"sync"
)

// Proxy forwards connections from a loopback listener to one target. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	state  state
	flow   chan struct{} // closed when forwarding may go on (Heal, Close)
	conns  map[net.Conn]struct{}
	closed bool
}

type state int

const (
	flowing state = iota
	cut
	stalled
)

// New starts a proxy to target (host:port) on a free 127.0.0.1 port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port), for the client.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection and, until Heal, closes new ones as soon as
// they are accepted: the client sees its connections reset and refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(cut)
	for c := range p.conns {
		c.Close()
	}
}

// Stall stops forwarding, in both directions, on every connection, old and
// new, until Heal: bytes sent meanwhile wait in the proxy, as they would in
// a partitioned network, and nothing is reset.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(stalled)
}

// Heal forwards again: stalled bytes are delivered, new connections reach
// the target.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(flowing)
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

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.setLocked(flowing) // release stalled pipes, which then fail on closed conns
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.state == cut || p.closed
		p.mu.Unlock()
		if refuse {
			client.Close()
			continue
		}
		upstream, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, upstream) {
			client.Close()
			upstream.Close()
			continue
		}
		p.wg.Go(func() { p.pipe(upstream, client) })
		p.wg.Go(func() { p.pipe(client, upstream) })
	}
}

// track registers a connection pair, unless the proxy was cut or closed
// meanwhile.
func (p *Proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == cut || p.closed {
		return false
	}
	p.conns[a] = struct{}{}
	p.conns[b] = struct{}{}
	return true
}

// pipe copies src to dst, holding bytes while the proxy is stalled. When
// either side fails it closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
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

// waitFlow blocks while the proxy is stalled.
func (p *Proxy) waitFlow() {
	p.mu.Lock()
	s, flow := p.state, p.flow
	p.mu.Unlock()
	if s == stalled {
		<-flow
	}
}
