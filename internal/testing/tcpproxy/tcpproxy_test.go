package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server, stopped with the test.
func echo(t *testing.T) string { return echoLines(t, nil) }

// echoLines starts a line echo server that also sends each line it reads
// on got (when not nil) before it echoes it, stopped with the test.
func echoLines(t *testing.T, got chan<- string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if got != nil {
						got <- line
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestForwardCutHeal(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t))
	require.NoError(t, err)
	defer p.Close()
	c, r := dial(t, p.Addr())
	got, err := roundTrip(c, r, "hello", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "hello", got)

	p.Cut()
	_, err = roundTrip(c, r, "after cut", 5*time.Second)
	require.Error(t, err, "a cut closes open connections")
	c2, r2 := dial(t, p.Addr()) // the listener stays: the connection is accepted, then closed
	_, err = roundTrip(c2, r2, "new", 5*time.Second)
	require.Error(t, err, "a cut refuses new connections")

	p.Heal()
	c3, r3 := dial(t, p.Addr())
	got, err = roundTrip(c3, r3, "healed", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "healed", got)
}

func TestStallHoldsBytesUntilHeal(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t))
	require.NoError(t, err)
	defer p.Close()
	c, r := dial(t, p.Addr())
	p.Stall()
	_, err = roundTrip(c, r, "held", 200*time.Millisecond)
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	require.True(t, nerr.Timeout(), "a stalled proxy forwards nothing and resets nothing: %v", err)

	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", got, "bytes sent while stalled arrive after the heal")
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echo(t))
	require.NoError(t, err)
	c, r := dial(t, p.Addr())
	p.Stall()
	require.NoError(t, p.Close(), "close while stalled must not hang")
	_, err = roundTrip(c, r, "closed", 5*time.Second)
	require.Error(t, err)
	require.NoError(t, p.Close(), "idempotent")
}

// TestStallRepliesLandsRequestsHoldsReplies: with replies stalled, what a
// client sends reaches the target and the target's reply waits in the
// proxy; a Cut then drops it with the connection.
func TestStallRepliesLandsRequestsHoldsReplies(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4)
	p, err := tcpproxy.New(echoLines(t, got))
	require.NoError(t, err)
	defer p.Close()
	c, r := dial(t, p.Addr())
	p.StallReplies()
	_, err = roundTrip(c, r, "landed", 200*time.Millisecond)
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	require.True(t, nerr.Timeout(), "the reply is held: %v", err)
	select {
	case line := <-got:
		require.Equal(t, "landed\n", line, "the request reached the target")
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the target while replies were stalled")
	}

	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = r.ReadString('\n')
	require.Error(t, err, "the held reply is dropped with the connection")
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the cut closes the connection: %v", err)
	p.Heal()
	c2, r2 := dial(t, p.Addr())
	line, err := roundTrip(c2, r2, "after", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "after", line)
}
