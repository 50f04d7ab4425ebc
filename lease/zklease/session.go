package zklease

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
)

// Connect is zk.Connect for a Locker. It connects to servers with the
// given session timeout and returns the connection with the Config that New
// needs to trust it: Connect observes what zk.Conn does not tell, the
// session timeout the ensemble actually granted (servers clamp the one asked
// for to their [minSessionTimeout, maxSessionTimeout], silently), every
// session event (disconnection, reconnection, expiry), and why a server
// cannot be dialled.
//
// servers must not be empty and sessionTimeout must be at least a
// millisecond (ZooKeeper counts milliseconds in an int32); anything else is
// an error wrapping aegis.ErrInvalid. With a zero timeout zk.Connect would
// connect and then fail every handshake, forever.
//
// options are zk's connection options (zk.WithLogger, zk.WithLogInfo, …).
// They are applied first; Connect then sets its own dialer and event
// callback, replacing any an option set. A caller that needs the session
// events itself uses zk.Connect and passes its channel as Config.Events.
//
// Like zk.Connect it returns at once and connects in the background; the
// Locker's calls wait for the session. Close the connection when done.
func Connect(servers []string, sessionTimeout time.Duration, options ...func(*zk.Conn)) (*zk.Conn, *Config, error) {
	if len(servers) == 0 {
		return nil, nil, fmt.Errorf("%w: zklease: Connect: servers is empty", aegis.ErrInvalid)
	}
	for i, s := range servers {
		if strings.TrimSpace(s) == "" {
			return nil, nil, fmt.Errorf("%w: zklease: Connect: servers[%d] is empty", aegis.ErrInvalid, i)
		}
	}
	switch {
	case sessionTimeout < time.Millisecond:
		return nil, nil, fmt.Errorf("%w: zklease: Connect: session timeout %s is not positive: ask for the session timeout you want (the servers clamp it to their [minSessionTimeout, maxSessionTimeout])", aegis.ErrInvalid, sessionTimeout)
	case sessionTimeout > math.MaxInt32*time.Millisecond:
		return nil, nil, fmt.Errorf("%w: zklease: Connect: session timeout %s does not fit ZooKeeper's int32 of milliseconds", aegis.ErrInvalid, sessionTimeout)
	}
	s := newSession(sessionTimeout)
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		s.dialed(address, err)
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
		return nil, nil, fmt.Errorf("zklease: Connect: %w", err)
	}
	return conn, &Config{SessionTimeout: sessionTimeout, session: s}, nil
}

// session is what a Locker knows of its connection's session beyond
// zk.Conn's State and SessionID: the granted timeout, a channel closed at
// every session event so that waits wake up, and (through Connect) why the
// servers could not be dialled.
type session struct {
	mu      sync.Mutex
	timeout time.Duration // 0: not known yet (New without a timeout learns it)
	// least, when not "", says that timeout is only the ensemble's
	// minSessionTimeout (a lower bound of the session's own), and why the
	// session's own could not be read.
	least   string
	changed chan struct{}
	dialErr map[string]error // by server, the last failed dial; Connect only
}

func newSession(timeout time.Duration) *session {
	return &session{timeout: timeout, changed: make(chan struct{}), dialErr: map[string]error{}}
}

// event wakes the waits up at a session event. It never blocks: zk calls
// it from its connection goroutines.
func (s *session) event(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.wake()
}

func (s *session) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *session) setTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeout, s.least = d, ""
}

// setLeast records the ensemble's minSessionTimeout as the session
// timeout, with why the session's own is not known.
func (s *session) setLeast(d time.Duration, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeout, s.least = d, why
}

// bound returns the session timeout and, when it is only the ensemble's
// minimum, why the session's own is not known.
func (s *session) bound() (time.Duration, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeout, s.least
}

// dialed records the outcome of a dial of server.
func (s *session) dialed(server string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.dialErr, server)
	} else {
		s.dialErr[server] = err
	}
}

// dialProblems describes the servers whose last dial failed ("" if none).
func (s *session) dialProblems() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for server, err := range s.dialErr {
		out = append(out, "server "+server+": "+err.Error())
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// now returns the granted timeout and a channel closed at the next event.
func (s *session) now() (time.Duration, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeout, s.changed
}

// ready waits until conn has a session, or ctx ends, or stop is closed,
// and returns the session's id.
func (s *session) ready(ctx context.Context, conn *zk.Conn, stop <-chan struct{}) (int64, error) {
	for {
		_, changed := s.now()
		if conn.State() == zk.StateHasSession {
			if id := conn.SessionID(); id != 0 {
				return id, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-stop:
			return 0, errClosed
		}
	}
}

// pollInterval is how often a Locker without Config.Events looks at the
// connection's state and session id.
const pollInterval = 20 * time.Millisecond

// poll wakes the session's waits whenever conn's state or session id
// differs from the last it saw, from state and id (read by the caller
// before the waits could begin), until stop is closed: the session events
// of a connection whose event channel the Locker was not given.
func (s *session) poll(conn *zk.Conn, state zk.State, id int64, stop <-chan struct{}) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if st, sid := conn.State(), conn.SessionID(); st != state || sid != id {
			state, id = st, sid
			s.wake()
		}
	}
}

// consTimeout reads the timeout the ensemble granted to session id from the
// server it is connected to: the four-letter word cons lists a server's
// connections, each with its session id (sid=0x…) and negotiated timeout
// in milliseconds (to=…). zk.Conn keeps the timeout to itself; cons is the
// server's own word for it. Servers answer cons only when it is in their
// 4lw.commands.whitelist (by default only srvr is): the error then quotes
// the refusal.
func consTimeout(ctx context.Context, server string, id int64) (time.Duration, error) {
	out, err := fourLetterWord(ctx, server, "cons")
	if err != nil {
		return 0, err
	}
	sid := fmt.Sprintf("sid=0x%x,", uint64(id))
	for line := range strings.Lines(out) {
		if !strings.Contains(line, sid) {
			continue
		}
		m := consTo.FindStringSubmatch(line)
		if m == nil {
			break
		}
		ms, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil || ms <= 0 {
			break
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	if !strings.Contains(out, "sid=") {
		return 0, fmt.Errorf("cons answered %q", strings.TrimSpace(firstLine(out)))
	}
	return 0, fmt.Errorf("cons lists no session 0x%x with a timeout", uint64(id))
}

var consTo = regexp.MustCompile(`[(,]to=(\d+)[,)]`)

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// fourLetterWord sends cmd to server and returns its whole answer, within
// ctx and at most 10 s.
func fourLetterWord(ctx context.Context, server, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	out, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read the answer to %s: %w", cmd, err)
	}
	return string(out), nil
}

// probeMinTimeout learns the least session timeout server grants (its
// minSessionTimeout) with a handshake of its own: a ConnectRequest asking
// for 1 ms, which the server raises to its minimum, then a closeSession.
// Every session the ensemble grants lasts at least that long, so it is a
// safe bound when the granted timeout of the Locker's own session is not
// known. (zk.Conn keeps the granted timeout to itself.)
func probeMinTimeout(ctx context.Context, server string) (time.Duration, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	// ConnectRequest: protocolVersion int32, lastZxidSeen int64, timeOut
	// int32, sessionId int64, passwd (int32 length, 16 bytes), behind an
	// int32 length.
	req := make([]byte, 4+44)
	binary.BigEndian.PutUint32(req[0:], 44)
	binary.BigEndian.PutUint32(req[16:], 1) // timeOut: 1 ms
	binary.BigEndian.PutUint32(req[28:], 16)
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	// ConnectResponse: length, protocolVersion int32, timeOut int32, …
	var head [12]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return 0, fmt.Errorf("read the handshake answer: %w", err)
	}
	ms := int32(binary.BigEndian.Uint32(head[8:]))
	if ms <= 0 {
		return 0, fmt.Errorf("the handshake answer grants a session timeout of %d ms", ms)
	}
	// closeSession: xid int32, type int32 (-11), behind an int32 length.
	var bye [12]byte
	binary.BigEndian.PutUint32(bye[0:], 8)
	binary.BigEndian.PutUint32(bye[4:], 1)
	binary.BigEndian.PutUint32(bye[8:], uint32(0xfffffff5)) // -11
	_, _ = c.Write(bye[:])
	return time.Duration(ms) * time.Millisecond, nil
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
