package tcpproxy

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Close ends a latency's wait, however long: a chunk held for an hour
// does not hold Close.
func TestCloseCutsLatencyShort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	t.Cleanup(func() {
		ln.Close()
		if c, ok := <-accepted; ok {
			c.Close()
		}
	})
	p, err := New(ln.Addr().String())
	require.NoError(t, err)
	p.SetLatency(time.Hour)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("held\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.held == 1
	}, 30*time.Second, 10*time.Millisecond, "the chunk is held by the latency")

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited on the hour's latency")
	}
}
