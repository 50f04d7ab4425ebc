package etcdboard_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/elect/etcdboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The Board's contract and Observe on it are tested with every other Board
// in package elect (TestBoardContract, TestObserveEveryBoard).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := etcdboard.New(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "etcdboard: client is nil")
	client, err := clientv3.New(clientv3.Config{Endpoints: testenv.EtcdEndpoints(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer client.Close()
	b, err := etcdboard.New(client, &etcdboard.Config{Prefix: testenv.Key(t) + "/"})
	require.NoError(t, err)
	err = b.Publish(t.Context(), "e", elect.Leader{Node: "a"}, time.Second)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "token 0 is not positive")
}
