package etcdlease_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/etcdlease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is a client of its own on endpoints, closed with the test.
func client(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// locker is a Locker on a client of its own on the shared cluster, as a
// separate process would have.
func locker(t testing.TB, cfg *etcdlease.Config) *etcdlease.Locker {
	t.Helper()
	l, err := etcdlease.New(client(t, testenv.EtcdEndpoints(t)), cfg)
	require.NoError(t, err)
	return l
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	locktest.Run(t, locktest.Config{
		New: func(t *testing.T) aegis.Locker { return locker(t, nil) },
		// The shared cluster's minimum lease TTL is 1 s (a 500 ms election
		// timeout); leases are whole seconds.
		TTL: time.Second,
	})
}

// sessionLocker is a Locker in session mode on a client of its own,
// closed with the test.
func sessionLocker(t testing.TB, cfg *etcdlease.Config) *etcdlease.Locker {
	t.Helper()
	c := etcdlease.Config{Session: true}
	if cfg != nil {
		c = *cfg
		c.Session = true
	}
	l, err := etcdlease.New(client(t, testenv.EtcdEndpoints(t)), &c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func TestLocktestSession(t *testing.T) {
	t.Parallel()
	locktest.Run(t, locktest.Config{
		New: func(t *testing.T) aegis.Locker { return sessionLocker(t, nil) },
		// The Locker's timer enforces the TTL: it need not be whole
		// seconds.
		TTL:    time.Second,
		MaxTTL: time.Minute, // the default SessionTTL
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.EtcdEndpoints(t))
	for name, tt := range map[string]struct {
		client *clientv3.Client
		cfg    *etcdlease.Config
		want   string
	}{
		"nil client":   {nil, nil, "client is nil"},
		"negative max": {c, &etcdlease.Config{MaxTTL: -time.Second}, "Config.MaxTTL -1s is shorter than 1s"},
		"sub-second":   {c, &etcdlease.Config{MaxTTL: 500 * time.Millisecond}, "Config.MaxTTL 500ms is shorter than 1s: etcd leases are whole seconds"},
		"huge max":     {c, &etcdlease.Config{MaxTTL: math.MaxInt64}, "Config.MaxTTL 2562047h47m16.854775807s is longer than etcd's limit"},
		"session ttl without session": {c, &etcdlease.Config{SessionTTL: 10 * time.Second},
			"Config.SessionTTL 10s is set but Config.Session is false"},
		"sub-second session":       {c, &etcdlease.Config{Session: true, SessionTTL: 500 * time.Millisecond}, "Config.SessionTTL 500ms is not a positive whole number of seconds"},
		"fractional session":       {c, &etcdlease.Config{Session: true, SessionTTL: 1500 * time.Millisecond}, "Config.SessionTTL 1.5s is not a positive whole number of seconds"},
		"negative session":         {c, &etcdlease.Config{Session: true, SessionTTL: -time.Second}, "Config.SessionTTL -1s is not a positive whole number of seconds"},
		"huge session":             {c, &etcdlease.Config{Session: true, SessionTTL: 9_000_000_001 * time.Second}, "is longer than etcd's limit of 9000000000 s"},
		"negative session max":     {c, &etcdlease.Config{Session: true, MaxTTL: -time.Second}, "Config.MaxTTL: aegis: invalid argument: ttl -1s is not positive"},
		"negative request timeout": {c, &etcdlease.Config{RequestTimeout: -time.Second}, "Config.RequestTimeout -1s is negative"},
	} {
		_, err := etcdlease.New(tt.client, tt.cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, name)
		require.ErrorContains(t, err, tt.want, name)
	}
	_, err := etcdlease.New(c, &etcdlease.Config{MaxTTL: 48 * time.Hour})
	require.NoError(t, err, "a longer MaxTTL is allowed")
	l, err := etcdlease.New(c, &etcdlease.Config{Session: true, SessionTTL: 5 * time.Second, MaxTTL: 100 * time.Millisecond})
	require.NoError(t, err, "session mode takes sub-second TTLs")
	require.NoError(t, l.Close())
}

// TestGrantTTLIsWholeSeconds: a grant refuses a TTL etcd would round, and
// Renew, whose callers pass remaining times (lockAtLeastFor), rounds up.
func TestGrantTTLIsWholeSeconds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := client(t, testenv.EtcdEndpoints(t))
	l, err := etcdlease.New(c, nil)
	require.NoError(t, err)
	key := testenv.Key(t)
	for _, ttl := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond} {
		_, err := l.TryAcquire(ctx, key, ttl)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, "ttl "+ttl.String()+" is not a whole number of seconds: etcd leases are whole seconds")
		_, err = l.Acquire(ctx, key, ttl)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, "ttl "+ttl.String()+" is not a whole number of seconds")
	}
	lease, err := l.TryAcquire(ctx, key, 3*time.Second)
	require.NoError(t, err, "the refusals left nothing behind")
	require.NoError(t, l.Renew(ctx, lease, 1200*time.Millisecond))
	require.Equal(t, 1200*time.Millisecond, lease.TTL, "the lease keeps the TTL asked for")
	require.EqualValues(t, 2, leaseTTL(t, c, key), "the etcd lease has the TTL rounded up")
	require.NoError(t, l.Release(ctx, lease))
}

// leaseTTL returns the granted TTL, in seconds, of the etcd lease of the
// only grant on key.
func leaseTTL(t *testing.T, c *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := c.Get(t.Context(), "aegis/lease/"+key, clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	ttl, err := c.TimeToLive(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
	return ttl.GrantedTTL
}
