package tcpproxy_test

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a line server that answers each line with prefix+line.
func echo(t *testing.T, prefix string) string {
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
					if _, err := io.WriteString(c, prefix+line); err != nil {
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

func roundTrip(c net.Conn, r *bufio.Reader, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

func dial(t *testing.T, p *tcpproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestForwardCutHeal(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t, "a:"))
	require.NoError(t, err)
	defer p.Close()

	c, r := dial(t, p)
	got, err := roundTrip(c, r, "hello")
	require.NoError(t, err)
	require.Equal(t, "a:hello", got)

	p.Cut()
	require.True(t, p.IsCut())
	_, err = roundTrip(c, r, "lost")
	require.Error(t, err, "a cut drops the open connection")
	c2, r2 := dial(t, p) // accepted by the proxy, then closed at once
	_, err = roundTrip(c2, r2, "refused")
	require.Error(t, err, "a cut refuses new connections")

	p.Heal()
	c3, r3 := dial(t, p)
	got, err = roundTrip(c3, r3, "back")
	require.NoError(t, err)
	require.Equal(t, "a:back", got)
}

func TestSetUpstream(t *testing.T) {
	t.Parallel()
	a, b := echo(t, "a:"), echo(t, "b:")
	p, err := tcpproxy.New(a)
	require.NoError(t, err)
	defer p.Close()
	c, r := dial(t, p)
	got, err := roundTrip(c, r, "x")
	require.NoError(t, err)
	require.Equal(t, "a:x", got)

	p.SetUpstream(b)
	require.Equal(t, b, p.Upstream())
	_, err = roundTrip(c, r, "y")
	require.Error(t, err, "the switch drops connections to the old upstream")
	c2, r2 := dial(t, p)
	got, err = roundTrip(c2, r2, "z")
	require.NoError(t, err)
	require.Equal(t, "b:z", got)
}

func TestLatency(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t, ""))
	require.NoError(t, err)
	defer p.Close()
	const d = 150 * time.Millisecond
	p.SetLatency(d)
	c, r := dial(t, p)
	for range 3 {
		start := time.Now()
		got, err := roundTrip(c, r, "slow")
		require.NoError(t, err)
		require.Equal(t, "slow", got)
		require.GreaterOrEqual(t, time.Since(start), d, "each round trip waits for the latency")
	}
	p.SetLatency(0)
	got, err := roundTrip(c, r, "fast")
	require.NoError(t, err)
	require.Equal(t, "fast", got)
}

func TestBadUpstream(t *testing.T) {
	t.Parallel()
	_, err := tcpproxy.New("nowhere")
	require.ErrorContains(t, err, `upstream "nowhere": want host:port`)
}

func TestCloseDropsConnections(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t, ""))
	require.NoError(t, err)
	c, r := dial(t, p)
	_, err = roundTrip(c, r, "x")
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close is idempotent")
	_, err = roundTrip(c, r, "y")
	require.Error(t, err)
}

func TestStallHoldsBytesUntilHeal(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t, "s:"))
	require.NoError(t, err)
	defer p.Close()
	c, r := dial(t, p)
	got, err := roundTrip(c, r, "before")
	require.NoError(t, err)
	require.Equal(t, "s:before", got)

	p.Stall()
	_, err = io.WriteString(c, "held\n")
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = r.ReadString('\n')
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "nothing is forwarded while stalled, and nothing is reset: %v", err)

	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "s:held\n", line, "the held bytes are delivered after Heal")
}
