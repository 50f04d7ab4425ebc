package natslease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/natslease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connect is a connection of its own to urls, closed with the test.
func connect(t testing.TB, urls []string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// locker is a Locker on a connection of its own to the shared cluster, as
// a separate process would have.
func locker(t testing.TB, cfg *natslease.Config) *natslease.Locker {
	t.Helper()
	l, err := natslease.New(connect(t, testenv.NATSURLs(t)), cfg)
	require.NoError(t, err)
	return l
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	locktest.Run(t, locktest.Config{
		New: func(t *testing.T) aegis.Locker { return locker(t, nil) },
		// NATS counts TTLs in whole seconds.
		TTL: time.Second,
	})
}

// bounded is a context that ends with the test or after a minute, so a
// hung call fails the test instead of the package's timeout.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	js := connect(t, testenv.NATSURLs(t))
	for name, tt := range map[string]struct {
		js   jetstream.JetStream
		cfg  *natslease.Config
		want string
	}{
		"nil":                      {nil, nil, "natslease: JetStream is nil"},
		"bucket":                   {js, &natslease.Config{Bucket: "a.b"}, `Config.Bucket "a.b" is not a bucket name`},
		"long bucket":              {js, &natslease.Config{Bucket: strings.Repeat("b", 65)}, "at most 64 bytes"},
		"replicas":                 {js, &natslease.Config{Replicas: 6}, "Config.Replicas 6 is not 1 to 5"},
		"negative replicas":        {js, &natslease.Config{Replicas: -1}, "Config.Replicas -1 is not 1 to 5"},
		"sub-second max":           {js, &natslease.Config{MaxTTL: 500 * time.Millisecond}, "Config.MaxTTL 500ms is shorter than 1s: NATS counts TTLs in whole seconds"},
		"negative request timeout": {js, &natslease.Config{RequestTimeout: -time.Second}, "Config.RequestTimeout -1s is negative"},
	} {
		_, err := natslease.New(tt.js, tt.cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, name)
		require.ErrorContains(t, err, tt.want, name)
	}
	domain, err := jetstream.NewWithDomain(js.Conn(), "hub")
	require.NoError(t, err)
	_, err = natslease.New(domain, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "only the default JetStream API is supported")
}

// TestExistingBucket: New creates its bucket, takes it again as it is, and
// refuses a bucket of the same name that cannot hold leases, naming why.
func TestExistingBucket(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	js := connect(t, testenv.NATSURLs(t))
	bucket := strings.ReplaceAll(testenv.Key(t), ".", "_")
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), bucket) })
	l, err := natslease.New(js, &natslease.Config{Bucket: bucket})
	require.NoError(t, err)
	require.Equal(t, "KV_"+bucket, l.Stream())
	kv, err := js.KeyValue(ctx, bucket)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Config().Replicas, "R3 by default")
	require.EqualValues(t, 1, st.History())
	require.Positive(t, st.LimitMarkerTTL(), "per-key TTLs")
	_, err = natslease.New(js, &natslease.Config{Bucket: bucket})
	require.NoError(t, err, "the same bucket again")

	_, err = natslease.New(js, &natslease.Config{Bucket: bucket, Replicas: 1})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, `bucket "`+bucket+`" has 3 replicas, Config.Replicas asks for 1`)

	plain := bucket + "_plain"
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: plain})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), plain) })
	_, err = natslease.New(js, &natslease.Config{Bucket: plain, Replicas: 1})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, `bucket "`+plain+`" exists without per-key TTLs (LimitMarkerTTL)`)
}

// TestBadInput: bad keys and TTLs are refused at the call, naming what is
// wrong, and keys NATS would refuse are mapped, each to a key of its own.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	l := locker(t, nil)
	k := testenv.Key(t)
	for _, tt := range []struct {
		key  string
		ttl  time.Duration
		want string
	}{
		{"", time.Second, "key is empty"},
		{strings.Repeat("k", 201), time.Second, "key is 201 bytes, at most 200 are allowed"},
		{"a\x00b", time.Second, "key contains a NUL byte"},
		{k, 500 * time.Millisecond, "ttl 500ms is not a whole number of seconds: NATS counts a key's TTL in whole seconds and would keep 0s"},
		{k, 1500 * time.Millisecond, "ttl 1.5s is not a whole number of seconds: NATS counts a key's TTL in whole seconds and would keep 1s"},
		{k, 0, "ttl 0s is not positive"},
		{k, time.Millisecond, "is not longer than its clock-drift margin"},
		{k, 25 * time.Hour, "ttl 25h0m0s is longer than the maximum 24h0m0s"},
	} {
		_, err := l.TryAcquire(ctx, tt.key, tt.ttl)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.want)
		require.ErrorContains(t, err, tt.want)
	}
	_, _, err := l.Notify(ctx, "")
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorIs(t, l.Renew(ctx, nil, time.Second), aegis.ErrInvalid)
	require.ErrorIs(t, l.Release(ctx, &aegis.Lease{Key: k}), aegis.ErrInvalid)

	// Keys with bytes NATS refuses in a key, and keys that map close to
	// them: all held at once, each with a lease of its own.
	keys := []string{k + ".a", k + "=2Ea", k + "/a", k + " *>", k + "ü", k + "..", "." + k}
	var leases []*aegis.Lease
	for _, key := range keys {
		lease, err := l.TryAcquire(ctx, key, 5*time.Second)
		require.NoError(t, err, key)
		leases = append(leases, lease)
	}
	for i, lease := range leases {
		require.NoError(t, l.Renew(ctx, lease, 5*time.Second), keys[i])
		require.NoError(t, l.Release(ctx, lease), keys[i])
	}
}

// TestRenewRoundsUp: Renew's TTL goes to the server rounded up to whole
// seconds (NATS would truncate it), and the lease keeps the TTL asked for.
func TestRenewRoundsUp(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	js := connect(t, testenv.NATSURLs(t))
	l, err := natslease.New(js, nil)
	require.NoError(t, err)
	k := testenv.Key(t)
	lease, err := l.TryAcquire(ctx, k, 3*time.Second)
	require.NoError(t, err)
	require.Equal(t, "3s", lastTTL(t, js, l, k))
	require.NoError(t, l.Renew(ctx, lease, 1200*time.Millisecond))
	require.Equal(t, 1200*time.Millisecond, lease.TTL)
	require.Equal(t, "2s", lastTTL(t, js, l, k), "rounded up, not truncated to 1s")
	require.NoError(t, l.Release(ctx, lease))
}

// lastTTL is the Nats-TTL header of key's last message.
func lastTTL(t *testing.T, js jetstream.JetStream, l *natslease.Locker, key string) string {
	t.Helper()
	s, err := js.Stream(t.Context(), l.Stream())
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(t.Context(), "$KV."+natslease.DefaultBucket+"."+natslease.BucketKey(key))
	require.NoError(t, err)
	return m.Header.Get(jetstream.MsgTTLHeader)
}

// TestNotify: a watch on the key fires on a release and on an expiry.
func TestNotify(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	l := locker(t, nil)
	k := testenv.Key(t)
	lease, err := l.TryAcquire(ctx, k, 5*time.Second)
	require.NoError(t, err)
	ch, stop, err := l.Notify(ctx, k)
	require.NoError(t, err)
	defer stop()
	require.NoError(t, l.Renew(ctx, lease, 5*time.Second))
	require.NoError(t, l.Release(ctx, lease))
	testenv.Recv(t, ch, 10*time.Second, "the release's wake-up")

	_, err = l.TryAcquire(ctx, k, time.Second)
	require.NoError(t, err)
	testenv.Recv(t, ch, 10*time.Second, "the expiry's wake-up")
	stop()
	stop() // idempotent
}
