package zklease

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Connect is zk.Connect for a Locker. It connects to servers with the
// given session timeout and returns the connection with the Config that New
// needs to trust it: Connect observes what zk.Conn does not tell, the
// session timeout the ensemble actually granted (servers clamp the one asked
// for to their [minSessionTimeout, maxSessionTimeout], silently) and every
// session event (disconnection, reconnection, expiry).
//
// options are zk's connection options (zk.WithLogger, zk.WithLogInfo, …).
// They are applied first; Connect then sets its own dialer and event
// callback, replacing any an option set. A caller that needs the session
// events itself uses zk.Connect and passes its channel as Config.Events.
//
// Like zk.Connect it returns at once and connects in the background; the
// Locker's calls wait for the session. Close the connection when done.
func Connect(servers []string, sessionTimeout time.Duration, options ...func(*zk.Conn)) (*zk.Conn, *Config, error) {
	s := newSession(sessionTimeout)
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c, granted: s.setTimeout}, nil
	}
	conn, _, err := zk.Connect(servers, sessionTimeout, func(c *zk.Conn) {
		for _, o := range options {
			o(c)
		}
		zk.WithDialer(dial)(c)
		zk.WithEventCallback(s.event)(c)
	})
	if err != nil {
		return nil, nil, err
	}
	return conn, &Config{SessionTimeout: sessionTimeout, session: s}, nil
}

// session is what a Locker knows of its connection's session beyond
// zk.Conn's State and SessionID: the granted timeout, and a channel closed
// at every session event so that waits wake up.
type session struct {
	mu      sync.Mutex
	timeout time.Duration
	changed chan struct{}
}

func newSession(timeout time.Duration) *session {
	return &session{timeout: timeout, changed: make(chan struct{})}
}

// event wakes the waits up at a session event. It never blocks: zk calls
// it from its connection goroutines.
func (s *session) event(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *session) setTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeout = d
}

// now returns the granted timeout and a channel closed at the next event.
func (s *session) now() (time.Duration, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeout, s.changed
}

// ready waits until conn has a session, or ctx ends, or stop is closed,
// and returns the session's id and granted timeout.
func (s *session) ready(ctx context.Context, conn *zk.Conn, stop <-chan struct{}) (int64, time.Duration, error) {
	for {
		timeout, changed := s.now()
		if conn.State() == zk.StateHasSession {
			if id := conn.SessionID(); id != 0 {
				return id, timeout, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-stop:
			return 0, 0, errClosed
		}
	}
}

// sniffConn reads the session timeout the server granted from the connect
// response that starts every connection: a 4-byte length, then the
// protocol version and the timeout in milliseconds, 4 bytes each, big
// endian (ZooKeeper's ConnectResponse). zk reads it from one goroutine
// before anything else.
type sniffConn struct {
	net.Conn
	n       int
	head    [12]byte
	granted func(time.Duration)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n < len(c.head) && n > 0 {
		c.n += copy(c.head[c.n:], p[:n])
		if c.n == len(c.head) {
			if ms := int32(binary.BigEndian.Uint32(c.head[8:])); ms > 0 {
				c.granted(time.Duration(ms) * time.Millisecond)
			}
		}
	}
	return n, err
}
