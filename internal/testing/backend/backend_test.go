package backend_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	s := backend.FromEnv()
	s.PostgresURL = testenv.PostgresURL(t)
	s.SQLitePath = filepath.Join(t.TempDir(), "lease.db")
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			l, closeFn, err := backend.Open(t.Context(), name, s)
			require.NoError(t, err)
			defer closeFn()
			lease, err := l.TryAcquire(t.Context(), "backend-test/"+t.Name()+time.Now().String(), time.Second)
			require.NoError(t, err)
			require.NoError(t, l.Release(t.Context(), lease))
		})
	}
	_, _, err := backend.Open(t.Context(), "nope", s)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, `unknown backend "nope" (known: `)
}

func TestRedlockAddrs(t *testing.T) {
	t.Parallel()
	six := []string{"a:1", "b:2", "c:3", "d:4", "e:5", "f:6"}
	tests := []struct {
		in, want []string
	}{
		{six, six[1:]}, // the shared set: the first is the single-node one
		{append(six, "g:7"), append(six, "g:7")[1:]},
		{six[:5], six[:5]}, // five or fewer: all of them
		{six[:3], six[:3]},
		{[]string{"a:1", " b:2 ", "", "c:3"}, []string{"a:1", "b:2", "c:3"}},
		{[]string{""}, nil},
		{nil, nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, backend.RedlockAddrs(tt.in), "%q", tt.in)
	}
}

// TestZKSessionTimeout: the session timeout asked for is the one leases
// are checked against (a TTL longer than the session is refused); the
// default is a minute; a negative one is an error.
func TestZKSessionTimeout(t *testing.T) {
	t.Parallel()
	key := "backend-test/" + t.Name() + time.Now().String()
	for _, tc := range []struct {
		session time.Duration
		ttl     time.Duration
		refused bool
	}{
		{session: time.Second, ttl: time.Second},
		{session: time.Second, ttl: 2 * time.Second, refused: true},
		{session: 0, ttl: 30 * time.Second}, // the default: a minute
	} {
		s := backend.FromEnv()
		s.ZKSessionTimeout = tc.session
		l, closeFn, err := backend.Open(t.Context(), "zookeeper", s)
		require.NoError(t, err)
		lease, err := l.TryAcquire(t.Context(), key, tc.ttl)
		if tc.refused {
			require.ErrorIs(t, err, aegis.ErrInvalid, "session %s, ttl %s", tc.session, tc.ttl)
			require.ErrorContains(t, err, "longer than the ZooKeeper session timeout 1s")
		} else {
			require.NoError(t, err, "session %s, ttl %s", tc.session, tc.ttl)
			require.NoError(t, l.Release(t.Context(), lease))
		}
		closeFn()
	}
	s := backend.FromEnv()
	s.ZKSessionTimeout = -time.Second
	_, _, err := backend.Open(t.Context(), "zookeeper", s)
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// A PostgreSQL server that cannot be reached is named, with the cause,
// without the URL's password.
func TestOpenPostgresDown(t *testing.T) {
	t.Parallel()
	s := backend.FromEnv()
	s.PostgresURL = "postgres://aegis:s3cretpw@127.0.0.1:1/x?sslmode=disable"
	_, _, err := backend.Open(t.Context(), "postgres", s)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.EqualError(t, err, "postgres: connect to PostgreSQL at 127.0.0.1:1: connection refused (is the server running, on that port?)")

	s.PostgresURL = "postgres://aegis:s3cretpw%zz@127.0.0.1:1/x"
	_, _, err = backend.Open(t.Context(), "postgres", s)
	require.EqualError(t, err, "postgres: open PostgreSQL: the URL does not parse (not shown: it may carry a password)")
}

// A backend whose servers are down says which and why at Open, at once,
// instead of hanging in the client's retries or saying only "context
// deadline exceeded".
func TestOpenServersDown(t *testing.T) {
	t.Parallel()
	down := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	for _, tc := range []struct {
		name string
		s    backend.Servers
		want string
	}{
		{"redis", backend.Servers{RedisAddrs: down}, "redis: no server answers: 127.0.0.1:1: connection refused"},
		{"redlock", backend.Servers{RedisAddrs: down}, "redlock: 0 of 3 servers answer, 2 needed: 127.0.0.1:1: connection refused; 127.0.0.1:2: connection refused; 127.0.0.1:3: connection refused"},
		{"etcd", backend.Servers{EtcdEndpoints: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}}, "etcd: no server answers: 127.0.0.1:1: connection refused; 127.0.0.1:2: connection refused"},
		{"zookeeper", backend.Servers{ZKServers: down[:1]}, "zookeeper: no server answers: 127.0.0.1:1: connection refused"},
		{"nats", backend.Servers{NATSURLs: []string{"nats://127.0.0.1:1", "nats://127.0.0.1:2"}}, "nats: no server answers: 127.0.0.1:1: connection refused; 127.0.0.1:2: connection refused"},
	} {
		start := time.Now()
		_, _, err := backend.Open(t.Context(), tc.name, tc.s)
		require.EqualError(t, err, tc.want, tc.name)
		require.Less(t, time.Since(start), 5*time.Second, "%s: said at once", tc.name)
	}
	for _, name := range []string{"redis", "redlock", "etcd", "zookeeper", "nats"} {
		_, _, err := backend.Open(t.Context(), name, backend.Servers{})
		require.ErrorIs(t, err, aegis.ErrInvalid, "%s without servers", name)
	}
	_, _, err := backend.Open(t.Context(), "nats", backend.Servers{NATSURLs: []string{"127.0.0.1:1"}})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.EqualError(t, err, "nats: aegis: invalid argument: server 1 is not a nats://host:port URL (not shown: it may carry a password)")
}
