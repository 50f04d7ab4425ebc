package reach_test

import (
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/reach"
)

func TestDialSaysWhy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	open := ln.Addr().String()
	require.NoError(t, reach.Dial(t.Context(), "", open, time.Second))

	// Port 1 on loopback: nothing listens there (a port freed by a
	// listener may be taken again by another test).
	err = reach.Dial(t.Context(), "tcp", "127.0.0.1:1", time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, "connection refused", err.Error())

	errs := reach.All(t.Context(), []string{open, "http://127.0.0.1:1", "unix:///tmp/x", ""}, time.Second)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], syscall.ECONNREFUSED, "a URL is dialled at its host:port")
	require.ErrorIs(t, errs[2], reach.ErrNotTCP)
	require.ErrorIs(t, errs[3], reach.ErrNotTCP)
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"a:1": "a:1", "http://a:2": "a:2", "https://a:3/x": "a:3", "unix:///s": "", "": ""} {
		got, ok := reach.HostPort(in)
		require.Equal(t, want, got, in)
		require.Equal(t, want != "", ok, in)
	}
}

// FuzzHostPort: an address is dialed as it is, an http(s) URL at its
// host (which errors name), never with its user or password; anything
// else is not dialed.
func FuzzHostPort(f *testing.F) {
	for _, s := range []string{"", "127.0.0.1:2379", "http://127.0.0.1:2379", "https://u:Pa55@h:1/x", "unix:///tmp/s", "http://", "http://@", "HTTP://h:1", "http://[::1]:2379", "http://u:p@ss@h:1"} {
		f.Add(s)
	}
	const marker = "Pa55-w0rd"
	f.Fuzz(func(t *testing.T, addr string) {
		hp, ok := reach.HostPort(addr)
		if !strings.Contains(addr, "://") {
			require.Equal(t, addr != "", ok)
			require.Equal(t, addr, hp)
			return
		}
		u, err := url.Parse(addr)
		require.Equal(t, err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "", ok, "%q", addr)
		if ok {
			require.Equal(t, u.Host, hp)
		} else {
			require.Empty(t, hp)
		}
		// The same endpoint with credentials.
		scheme, rest, _ := strings.Cut(addr, "://")
		if strings.Contains(scheme, marker) {
			return
		}
		hp, _ = reach.HostPort(scheme + "://user:" + marker + "@" + rest)
		require.NotContains(t, hp, marker)
	})
}
