package webaccess_test

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/webaccess"
)

func TestLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7070", true},
		{"127.8.9.10:7070", true},
		{"localhost:7070", true},
		{"LocalHost:0", true},
		{"[::1]:7070", true},
		{":7070", false},
		{"0.0.0.0:7070", false},
		{"[::]:7070", false},
		{"192.168.1.10:7070", false},
		{"example.com:7070", false},
		{"localhost.example.com:7070", false},
		{"127.0.0.1", false}, // no port: not an address
		{"", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, webaccess.Loopback(tt.addr), tt.addr)
	}
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	a, b := webaccess.NewToken(), webaccess.NewToken()
	require.Len(t, a, 32)
	require.NotEqual(t, a, b)
}

func TestLoopbackHostAndCrossOrigin(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "http://127.0.0.1:7080/x", nil)
	require.True(t, webaccess.LoopbackHost(r))
	require.Empty(t, webaccess.CrossOrigin(r), "no Origin, no Sec-Fetch-Site")
	r.Header.Set("Origin", "http://127.0.0.1:7080")
	require.Empty(t, webaccess.CrossOrigin(r), "its own origin")
	r.Header.Set("Origin", "http://evil.example")
	require.Equal(t, "requests from another origin are refused", webaccess.CrossOrigin(r))
	r.Header.Del("Origin")
	r.Header.Set("Sec-Fetch-Site", "same-site")
	require.Equal(t, "cross-site requests are refused", webaccess.CrossOrigin(r))

	r = httptest.NewRequest("GET", "http://rebound.example:7080/", nil)
	require.False(t, webaccess.LoopbackHost(r), "a name rebound to 127.0.0.1 is not loopback")
	r.Host = "[::1]:7080"
	require.True(t, webaccess.LoopbackHost(r))
}
