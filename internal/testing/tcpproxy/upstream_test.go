package tcpproxy_test

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/tcpproxy"
)

// named starts a line server that answers each line with name + ":" +
// line, stopped with the test.
func named(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+":"+line); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestSetUpstream(t *testing.T) {
	t.Parallel()
	a, b := named(t, "a"), named(t, "b")
	p, err := tcpproxy.New(a)
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, a, p.Upstream())
	c, r := dial(t, p.Addr())
	got, err := roundTrip(c, r, "x", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "a:x", got)

	p.SetUpstream(b)
	require.Equal(t, b, p.Upstream())
	_, err = roundTrip(c, r, "y", 5*time.Second)
	require.Error(t, err, "the switch closes the connections to the old upstream")
	c2, r2 := dial(t, p.Addr())
	got, err = roundTrip(c2, r2, "z", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "b:z", got)
}

func TestLatency(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(named(t, "s"))
	require.NoError(t, err)
	defer p.Close()
	const d = 150 * time.Millisecond
	p.SetLatency(d)
	c, r := dial(t, p.Addr())
	for range 3 {
		start := time.Now()
		got, err := roundTrip(c, r, "slow", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "s:slow", got)
		require.GreaterOrEqual(t, time.Since(start), d, "each round trip waits for the latency")
	}
	p.SetLatency(0)
	got, err := roundTrip(c, r, "fast", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "s:fast", got)
}

func TestIsCut(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(named(t, "s"))
	require.NoError(t, err)
	defer p.Close()
	require.False(t, p.IsCut())
	p.Cut()
	require.True(t, p.IsCut())
	p.Stall()
	require.False(t, p.IsCut(), "a stall is not a cut")
	p.Heal()
	require.False(t, p.IsCut())
}
