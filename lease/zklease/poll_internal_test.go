package zklease

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// TestPollWakesWaits: a Locker without an event channel wakes its waits
// when the connection's state changes, and Close stops the poller.
func TestPollWakesWaits(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(testenv.ZKServers(t)[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	conn, _, err := zk.Connect([]string{p.Addr()}, 30*time.Second, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	l, err := New(conn, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = l.sess.ready(ctx, conn, l.stop)
	require.NoError(t, err, "a session within 10s")
	_, changed := l.sess.now()
	p.Cut()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up within 10s of the connection's loss")
	}
	require.NoError(t, l.Close(), "Close waits for the poller")
}

// A session granted before the poller's goroutine first runs is still a
// change to a wait begun before it: the poller starts from the state read
// when the Locker was made. (It read its own start state once, and a
// TryAcquire on a loaded machine waited a minute on a connection that had
// its session, beside a second test suite.)
func TestPollStartsFromTheStateBeforeIt(t *testing.T) {
	t.Parallel()
	conn, _, err := zk.Connect(testenv.ZKServers(t), 30*time.Second, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 10*time.Millisecond,
		"a session within 10s")
	s := newSession(0)
	_, changed := s.now()
	stop := make(chan struct{})
	done := make(chan struct{})
	// What New read before the session: connecting, no id.
	go func() { defer close(done); s.poll(conn, zk.StateConnecting, 0, stop) }()
	defer func() { close(stop); <-done }()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up within 10s for a session granted before the poller ran")
	}
}
