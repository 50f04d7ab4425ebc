package zklease_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/tool/testenv"
	"github.com/aegislab/aegis/lease/zklease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet drops zk's log lines (connected, authenticated, …).
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// sessionTimeout is the session timeout the tests ask the shared ensemble
// for; it bounds their leases' deadlines.
const sessionTimeout = 30 * time.Second

// connect connects to servers through zklease.Connect, closing the
// connection and the Locker with the test.
func connect(t testing.TB, servers []string, timeout time.Duration, cfg func(*zklease.Config)) (*zklease.Locker, *zk.Conn) {
	t.Helper()
	conn, c, err := zklease.Connect(servers, timeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	if cfg != nil {
		cfg(c)
	}
	l, err := zklease.New(conn, c)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, l.Close())
		conn.Close()
	})
	return l, conn
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	locktest.Run(t, locktest.Config{
		New: func(t *testing.T) aegis.Locker {
			l, _ := connect(t, testenv.ZKServers(t), sessionTimeout, nil)
			return l
		},
		// The TTL is the Locker's timer; by default the session timeout
		// bounds it.
		TTL:    time.Second,
		MaxTTL: sessionTimeout,
	})
}
