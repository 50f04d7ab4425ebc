// Package tcpproxy is a TCP proxy for tests that cut a client off from its
// servers while the servers keep running: the client connects to the
// proxy's loopback address, the proxy forwards to the target, and a test
// can drop every connection and refuse new ones (Cut), or keep connections
// open and forward nothing (Stall, a partition without resets), until Heal.
// The lab also adds latency (SetLatency) and moves a proxy to another
// server (SetUpstream, a failover behind a virtual IP).
package tcpproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from a loopback listener to one target. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	state   state
	flow    chan struct{} // closed when forwarding may go on (Heal, Close)
	conns   map[net.Conn]struct{}
	closed  bool
	done    chan struct{} // closed by Close: ends the latency's waits
	latency time.Duration // added before forwarding what a client sends
	held    int           // chunks waiting out the latency now
}

type state int

const (
	flowing state = iota
	cut
	stalled
	repliesStalled
)

// New starts a proxy to target (host:port) on a free 127.0.0.1 port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port), for the client.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the address new connections are forwarded to.
func (p *Proxy) Upstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetUpstream forwards new connections to target (host:port) and closes
// the current ones, as a failover behind a virtual IP does.
func (p *Proxy) SetUpstream(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
}

// SetLatency delays each chunk a client sends by d before it is forwarded,
// so a request-response round trip takes d longer. Zero removes it.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// IsCut reports whether the proxy is cut (between Cut and Heal).
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == cut
}

// Cut closes every connection and, until Heal, closes new ones as soon as
// they are accepted: the client sees its connections reset and refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.setLocked(cut) // after the close: a held reply is dropped, not sent
}

// Stall stops forwarding, in both directions, on every connection, old and
// new, until Heal: bytes sent meanwhile wait in the proxy, as they would in
// a partitioned network, and nothing is reset.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(stalled)
}

// StallReplies stops forwarding what the target sends, on every
// connection, until Heal or Cut, and forwards what clients send: a
// client's requests land and their replies wait in the proxy, as when a
// reply is lost. Cut then drops the replies with the connections.
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(repliesStalled)
}

// Heal forwards again: stalled bytes are delivered, new connections reach
// the target.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(flowing)
}

func (p *Proxy) setLocked(s state) {
	held := func(s state) bool { return s == stalled || s == repliesStalled }
	if held(p.state) && s != p.state {
		close(p.flow)
	}
	if held(s) && s != p.state {
		p.flow = make(chan struct{})
	}
	p.state = s
}

// Close stops the proxy, closes every connection and waits for its
// goroutines; it cuts short any latency's wait, however long.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
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
		refuse, target := p.state == cut || p.closed, p.target
		p.mu.Unlock()
		if refuse {
			client.Close()
			continue
		}
		upstream, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, upstream, target) {
			client.Close()
			upstream.Close()
			continue
		}
		p.wg.Go(func() { p.pipe(upstream, client, true) })
		p.wg.Go(func() { p.pipe(client, upstream, false) })
	}
}

// track registers a connection pair, unless the proxy was cut, closed or
// moved to another target meanwhile.
func (p *Proxy) track(a, b net.Conn, target string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == cut || p.closed || p.target != target {
		return false
	}
	p.conns[a] = struct{}{}
	p.conns[b] = struct{}{}
	return true
}

// pipe copies src to dst, holding bytes while the proxy is stalled, and
// delaying what the client sends (fromClient) by the latency. When either
// side fails it closes both.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
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
			if fromClient {
				p.delay()
			}
			if !p.waitFlow(fromClient) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// delay waits for the latency, or until the proxy closes.
func (p *Proxy) delay() {
	p.mu.Lock()
	d := p.latency
	p.held++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.held--
		p.mu.Unlock()
	}()
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.done:
	}
}

// waitFlow blocks while the proxy is stalled, and while replies are
// stalled for what the target sends (not fromClient).
// It reports whether to forward: false when the proxy was cut meanwhile.
func (p *Proxy) waitFlow(fromClient bool) bool {
	p.mu.Lock()
	s, flow := p.state, p.flow
	p.mu.Unlock()
	if s != stalled && (s != repliesStalled || fromClient) {
		return true
	}
	<-flow
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state != cut && !p.closed
}
