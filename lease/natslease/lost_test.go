package natslease_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/losstest"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/natslease"
)

// TestStaleLeaseIsLost renews and releases a lease whose key is gone or
// taken: after its own release, after a successor's grant from another
// Locker, after its TTL passed with no successor, and with its Owner
// altered. Each write (the renewal's publish, the release's delete) is
// refused with ErrLost saying why, and a successor stays intact; the grant's
// own refusal (a live key) is ErrHeld.
func TestStaleLeaseIsLost(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	check := func(t *testing.T, name string, err error, reason string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrLost, name)
		require.ErrorContains(t, err, reason, name)
	}

	t.Run("AfterOwnRelease", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a := locker(t, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx, lease))
		check(t, "renew", a.Renew(ctx, lease, ttl), "key gone (released")
		check(t, "release", a.Release(ctx, lease), "key gone (released")
	})

	t.Run("AfterSuccessor", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a, b, c := locker(t, nil), locker(t, nil), locker(t, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		_, err = b.TryAcquire(ctx, key, 10*ttl)
		require.ErrorIs(t, err, aegis.ErrHeld, "the grant's write refused: a live key")
		var next *aegis.Lease
		require.Eventually(t, func() bool {
			next, err = b.TryAcquire(ctx, key, 10*ttl)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "the successor is granted the key after the first lease expires")
		require.Greater(t, next.Token, lease.Token)
		// a wrote the lease's last revision: its renewal's publish expects
		// it and is refused, then the leader's read names the successor.
		check(t, "renew", a.Renew(ctx, lease, ttl), "key granted to another owner")
		check(t, "release", a.Release(ctx, lease), "key granted to another owner")
		_, err = c.TryAcquire(ctx, key, ttl)
		require.ErrorIs(t, err, aegis.ErrHeld, "the successor is intact")
		require.NoError(t, b.Renew(ctx, next, 10*ttl), "the successor still holds")
		require.NoError(t, b.Release(ctx, next))
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a := locker(t, nil)
		key := testenv.Key(t)
		wake, stopWake, err := a.Notify(ctx, key)
		require.NoError(t, err)
		defer stopWake()
		lease, err := a.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		testenv.Recv(t, wake, 10*time.Second, "the expiry")
		check(t, "renew", a.Renew(ctx, lease, ttl), "key expired (the stream's leader removed it at its TTL)")
		check(t, "release", a.Release(ctx, lease), "key expired")
	})

	t.Run("Forged", func(t *testing.T) {
		t.Parallel()
		ctx := bounded(t)
		a := locker(t, nil)
		key := testenv.Key(t)
		lease, err := a.TryAcquire(ctx, key, 5*ttl)
		require.NoError(t, err)
		for _, forged := range []*aegis.Lease{
			{Key: key, Token: lease.Token + 1, Owner: lease.Owner, TTL: ttl},
			{Key: key, Token: lease.Token, Owner: strings.Repeat("a", 32) + ":" + strings.SplitN(lease.Owner, ":", 2)[1], TTL: ttl},
			{Key: key, Token: lease.Token, Owner: "not an owner", TTL: ttl},
		} {
			check(t, "renew", a.Renew(ctx, forged, ttl), "")
			check(t, "release", a.Release(ctx, forged), "")
		}
		require.NoError(t, a.Renew(ctx, lease, 5*ttl), "the lease is intact")
		require.NoError(t, a.Release(ctx, lease))
	})
}

// TestWriteAfterAnotherLocker renews and releases a lease through Lockers
// that did not write its last revision (another process's Locker, and the
// granting Locker after another renewed it, as after a renewal whose answer
// was lost): each reads the key's last revision from the stream's leader
// and writes after it.
func TestWriteAfterAnotherLocker(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	a, b := locker(t, nil), locker(t, nil)
	key := testenv.Key(t)
	lease, err := a.TryAcquire(ctx, key, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, b.Renew(ctx, lease, 5*time.Second), "through a Locker that never saw it")
	require.NoError(t, a.Renew(ctx, lease, 5*time.Second), "the granting Locker, behind by one revision")
	require.NoError(t, b.Release(ctx, lease), "b is behind now")
	_, err = a.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err, "released")
}

// TestUnreachable: New on a connection whose server never answers (it is
// still connecting to a closed port), and every call of a Locker whose
// server stops answering (a stalled proxy), give up after
// Config.RequestTimeout with an error that names the server (not its
// password) and is neither ErrHeld nor ErrLost.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := closed.Addr().String()
	require.NoError(t, closed.Close())
	nc, err := nats.Connect("nats://aegis:s3cret@"+addr, nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := natslease.New(js, &natslease.Config{RequestTimeout: 500 * time.Millisecond})
		done <- err
	}()
	err = testenv.Recv(t, done, time.Minute, "New to give up")
	require.ErrorContains(t, err, "natslease: create bucket \"aegis_leases\": no answer from NATS at "+addr)
	require.NotContains(t, err.Error(), "s3cret")

	// A Locker whose one server stops answering: every call, under a
	// context without deadline, gives up after RequestTimeout.
	p, err := tcpproxy.New(strings.TrimPrefix(testenv.NATSURLs(t)[0], "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	nc, err = nats.Connect("nats://aegis:s3cret@"+p.Addr(), nats.IgnoreDiscoveredServers())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	l, err := natslease.New(js, &natslease.Config{RequestTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	key := testenv.Key(t)
	lease, err := l.TryAcquire(context.Background(), key, 5*time.Second)
	require.NoError(t, err)
	forged := &aegis.Lease{Key: testenv.Key(t), Token: 1, Owner: strings.Repeat("a", 32) + ":1", TTL: time.Second}
	p.Stall()
	defer p.Heal()
	for name, call := range map[string]func(context.Context) error{
		"TryAcquire":  func(ctx context.Context) error { _, err := l.TryAcquire(ctx, testenv.Key(t), time.Second); return err },
		"Renew":       func(ctx context.Context) error { return l.Renew(ctx, lease, 5*time.Second) },
		"Release":     func(ctx context.Context) error { return l.Release(ctx, lease) },
		"RenewRead":   func(ctx context.Context) error { return l.Renew(ctx, forged, time.Second) },
		"ReleaseRead": func(ctx context.Context) error { return l.Release(ctx, forged) },
		"Notify":      func(ctx context.Context) error { _, _, err := l.Notify(ctx, key); return err },
		"Hold":        func(ctx context.Context) error { _, err := aegis.Hold(ctx, l, testenv.Key(t), time.Second); return err },
	} {
		go func() { done <- call(context.Background()) }()
		err := testenv.Recv(t, done, time.Minute, name+" to give up")
		require.Error(t, err, name)
		require.NotErrorIs(t, err, aegis.ErrHeld, name)
		require.NotErrorIs(t, err, aegis.ErrLost, name)
		require.ErrorContains(t, err, "no answer from NATS at "+p.Addr(), name)
		require.NotContains(t, err.Error(), "s3cret", name)
	}
}

// TestReplyLost: each write of a lease (the grant, a renewal, the
// release) lands on the cluster while its answer waits in a proxy, then
// the connection drops and the answer is lost. The call, sent again on
// the new connection, finds its own write and returns as if answered: the
// grant with the revision that landed as its token, the renewal keeping
// the lease, the release freeing the key.
func TestReplyLost(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second // no expiry in the test, however slow
	ctx := bounded(t)
	p, err := tcpproxy.New(strings.TrimPrefix(testenv.NATSURLs(t)[0], "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	nc, err := nats.Connect("nats://"+p.Addr(), nats.IgnoreDiscoveredServers(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := natslease.New(js, nil)
	require.NoError(t, err)
	other := locker(t, nil)
	stream, err := connect(t, testenv.NATSURLs(t)).Stream(ctx, l.Stream())
	require.NoError(t, err)
	key := testenv.Key(t)
	// last is the key's last message: its revision, and whether it is a
	// delete marker (0, false: none yet). A follower may answer late; the
	// waits below poll.
	last := func() (uint64, bool) {
		m, err := stream.GetLastMsgForSubject(ctx, "$KV."+natslease.DefaultBucket+"."+natslease.BucketKey(key))
		if err != nil {
			return 0, false
		}
		return m.Sequence, m.Header.Get("KV-Operation") == "DEL"
	}
	revision := func() uint64 { rev, _ := last(); return rev }
	replyLost := func(name string, call func() error, landed func() bool) {
		t.Helper()
		p.StallReplies()
		done := make(chan error, 1)
		go func() { done <- call() }()
		require.Eventually(t, landed, 30*time.Second, 10*time.Millisecond, "%s never landed", name)
		p.Cut()
		p.Heal()
		require.NoError(t, testenv.Recv(t, done, time.Minute, name+" to return"), name)
	}

	var lease *aegis.Lease
	replyLost("TryAcquire", func() (err error) {
		lease, err = l.TryAcquire(ctx, key, ttl)
		return err
	}, func() bool { return revision() > 0 })
	granted := revision()
	require.Equal(t, aegis.Token(granted), lease.Token, "the grant's token is the revision that landed")

	replyLost("Renew", func() error { return l.Renew(ctx, lease, ttl) },
		func() bool { return revision() > granted })
	_, err = other.TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, aegis.ErrHeld, "the renewed lease holds its key")

	renewed := revision()
	replyLost("Release", func() error { return l.Release(ctx, lease) },
		func() bool { rev, del := last(); return del && rev > renewed })
	next, err := other.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err, "released")
	require.Greater(t, next.Token, lease.Token)
	require.NoError(t, other.Release(ctx, next))
	require.ErrorIs(t, l.Release(ctx, lease), aegis.ErrLost, "a second release of the same lease")
}

// TestCutOffHolderStopsBeforeSuccessor: a holder whose connections to the
// cluster stall (a partition, no reset) has its Held's context cancelled
// before another Locker is granted the key, the successor's token is
// greater, and the holder's fenced write after the heal is refused
// (losstest, as for etcd and ZooKeeper).
func TestCutOffHolderStopsBeforeSuccessor(t *testing.T) {
	t.Parallel()
	var proxies []*tcpproxy.Proxy
	var urls []string
	for _, u := range testenv.NATSURLs(t) {
		p, err := tcpproxy.New(strings.TrimPrefix(u, "nats://"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies = append(proxies, p)
		urls = append(urls, "nats://"+p.Addr())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.IgnoreDiscoveredServers(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	holder, err := natslease.New(js, nil)
	require.NoError(t, err)
	each := func(f func(*tcpproxy.Proxy)) func() {
		return func() {
			for _, p := range proxies {
				f(p)
			}
		}
	}
	const ttl = 2 * time.Second
	losstest.RunCutOff(t, losstest.CutOff{
		Holder: holder, Successor: locker(t, nil),
		Cut: each((*tcpproxy.Proxy).Stall), Heal: each((*tcpproxy.Proxy).Heal),
		TTL: ttl,
		// The key expires TTL after its last write, on the stream
		// leader's clock; no election: only the holder is cut off.
		Bound: 3*ttl + 5*time.Second,
	})
}
