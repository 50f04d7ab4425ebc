package reach_test

import (
	"net"
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
