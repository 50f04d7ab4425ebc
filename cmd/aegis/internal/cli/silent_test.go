package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// silentServer listens on loopback, accepts every connection and never
// answers, until the test ends: a PostgreSQL that hangs. It returns its
// address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		testenv.Recv(t, done, 10*time.Second, "the listener's accept loop to end")
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Every command that connects to PostgreSQL gives up on a server that
// accepts and never answers, naming the server and never the password.
func TestPostgresSilentServer(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	url := fmt.Sprintf("postgres://aegis:s3cret-pw@%s/aegis?sslmode=disable", addr)
	for _, args := range [][]string{
		{"inspect", "--postgres-url", url, "stuck"},
		{"schedule", "list", "--store", url},
		{"console", "--store", url, "--addr", "127.0.0.1:0"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr bytes.Buffer
			exited := make(chan int, 1)
			go func() { exited <- Main(ctx, args, &stdout, &stderr) }()
			t.Cleanup(func() {
				cancel()
				select {
				case <-exited:
				case <-time.After(time.Minute):
					t.Error(errors.New("the command did not end when cancelled"))
				}
			})
			code := testenv.Recv(t, exited, time.Minute, fmt.Sprintf("aegis %s to give up on a server that never answers", args[0]))
			exited <- code // for the cleanup
			require.Equal(t, 1, code, "%s", &stderr)
			require.Contains(t, stderr.String(), "connect to PostgreSQL at "+addr+": no answer before the deadline")
			require.NotContains(t, stderr.String()+stdout.String(), "s3cret-pw")
		})
	}
}
