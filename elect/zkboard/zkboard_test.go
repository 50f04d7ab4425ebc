package zkboard_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/elect/zkboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The Board's contract and Observe on it are tested with every other Board
// in package elect (TestBoardContract, TestObserveEveryBoard).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	invalid := func(err error, want string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, want)
	}
	_, err := zkboard.New(nil, nil)
	invalid(err, "zkboard: conn is nil")
	conn, _, err := zk.Connect(testenv.ZKServers(t), 10*time.Second, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	defer conn.Close()
	for _, root := range []string{"aegis", "/aegis/", "/a//b"} {
		_, err = zkboard.New(conn, &zkboard.Config{Root: root})
		invalid(err, "zkboard: Config.Root")
	}
	b, err := zkboard.New(conn, &zkboard.Config{Root: "/" + testenv.Key(t)})
	require.NoError(t, err)
	defer b.Close()
	invalid(b.Publish(t.Context(), "e", elect.Leader{Node: "a"}, time.Second), "token 0 is not positive")
}

// A record its Board stopped refreshing is deleted by that Board TTL after
// its last Publish, and a refresh before then keeps it.
func TestRecordExpires(t *testing.T) {
	t.Parallel()
	conn, _, err := zk.Connect(testenv.ZKServers(t), 10*time.Second, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	defer conn.Close()
	b, err := zkboard.New(conn, &zkboard.Config{Root: "/" + testenv.Key(t)})
	require.NoError(t, err)
	defer b.Close()
	l := elect.Leader{Node: "a", Token: 3, Since: time.UnixMicro(1)}
	require.NoError(t, b.Publish(t.Context(), "e", l, time.Hour))
	require.NoError(t, b.Publish(t.Context(), "e", l, 100*time.Millisecond), "a refresh with a shorter TTL")
	require.Eventually(t, func() bool {
		got, err := b.Read(t.Context(), "e")
		require.NoError(t, err)
		return got == elect.Leader{}
	}, 10*time.Second, 10*time.Millisecond, "the record outlived its TTL")
	err = b.Publish(t.Context(), "e", elect.Leader{Node: "old", Token: 2}, time.Hour)
	require.ErrorIs(t, err, aegis.ErrStale, "a token lower than an expired record's")
}
