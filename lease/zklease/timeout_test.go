package zklease_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/zklease"
)

// TestZKConnectLearnsSessionTimeout is the probe's case: a Locker made by
// New(conn, nil) on a connection of zk.Connect(servers, 4s) bounds TTLs by
// the 4 s session the ensemble granted (read from the server, which lists
// its sessions with their timeouts), not by the ensemble's minimum.
func TestZKConnectLearnsSessionTimeout(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	const asked = 4 * time.Second
	l := plainLocker(t, testenv.ZKServers(t), asked)
	require.Less(t, minSessionTimeout(t, testenv.ZKServers(t)[0]), asked, "the shared ensemble's minSessionTimeout is below the session asked for")
	lease, err := l.TryAcquire(ctx, testenv.Key(t), 3*time.Second)
	end := time.Now() // after the request's start, which the deadline counts from
	require.NoError(t, err, "a TTL within the 4s session")
	require.False(t, lease.Deadline.After(end.Add(3*time.Second)), "the 3s TTL bounds the deadline")
	require.NoError(t, l.Release(ctx, lease))
	_, err = l.TryAcquire(ctx, testenv.Key(t), 5*time.Second)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "ttl 5s is longer than the ZooKeeper session timeout 4s")
}

// TestZKConnectWithoutCons: when the server will not list its sessions
// (the four-letter word cons is not in its 4lw.commands.whitelist, as by
// default), the Locker knows only the ensemble's minSessionTimeout, which
// bounds its TTLs, and its refusal says exactly that and what to do.
func TestZKConnectWithoutCons(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	front := consRefused(t, testenv.ZKServers(t)[0])
	l := plainLocker(t, []string{front}, 4*time.Second)
	least := minSessionTimeout(t, testenv.ZKServers(t)[0])
	lease, err := l.TryAcquire(ctx, testenv.Key(t), least)
	require.NoError(t, err, "a TTL of the least session timeout")
	require.NoError(t, l.Release(ctx, lease))
	_, err = l.TryAcquire(ctx, testenv.Key(t), 3*time.Second)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	for _, want := range []string{
		"ttl 3s is longer than " + least.String() + ", the least session timeout the ZooKeeper ensemble grants and all this Locker knows of its session's",
		"the minSessionTimeout of " + front,
		"cons is not executed because it is not in the whitelist",
		"pass the session timeout the ensemble granted as Config.SessionTimeout",
		"zklease.Connect",
		"raise Config.MaxTTL",
	} {
		require.ErrorContains(t, err, want)
	}
}

// plainLocker is New(conn, nil) on a connection of zk.Connect(servers,
// timeout), both closed with the test.
func plainLocker(t *testing.T, servers []string, timeout time.Duration) *zklease.Locker {
	t.Helper()
	conn, _, err := zk.Connect(servers, timeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	l, err := zklease.New(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, l.Close())
		conn.Close()
	})
	return l
}

// consRefused starts a front to the ZooKeeper server at target that
// answers the four-letter word cons as a server whose whitelist leaves it
// out, and forwards every other connection. It stops with the test.
func consRefused(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns[c] = true
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	serve := func(c net.Conn) {
		defer c.Close()
		head := make([]byte, 4)
		if _, err := io.ReadFull(c, head); err != nil {
			return
		}
		if string(head) == "cons" {
			_, _ = c.Write([]byte("cons is not executed because it is not in the whitelist.\n"))
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		track(up)
		defer up.Close()
		if _, err := up.Write(head); err != nil {
			return
		}
		done := make(chan struct{}, 2)
		wg.Go(func() { _, _ = io.Copy(up, c); done <- struct{}{} })
		wg.Go(func() { _, _ = io.Copy(c, up); done <- struct{}{} })
		<-done // either side ended: end both
		_ = c.Close()
		_ = up.Close()
		<-done
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Go(func() { serve(c) })
		}
	})
	return ln.Addr().String()
}
