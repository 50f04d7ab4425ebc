package redisboard_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/elect/redisboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The Board's contract and Observe on it are tested with every other Board
// in package elect (TestBoardContract, TestObserveEveryBoard).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	invalid := func(err error, want string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, want)
	}
	_, err := redisboard.New(nil, nil)
	invalid(err, "redisboard: client is nil")
	var nilClient *redis.Client
	_, err = redisboard.New(nilClient, nil)
	invalid(err, "redisboard: client is a nil *redis.Client")
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	defer client.Close()
	for _, p := range []string{"a{b", strings.Repeat("p", 65)} {
		_, err = redisboard.New(client, &redisboard.Config{Prefix: p})
		invalid(err, "redisboard: aegis: invalid argument: Config.Prefix")
	}
	b, err := redisboard.New(client, &redisboard.Config{Prefix: testenv.Key(t) + ":"})
	require.NoError(t, err)
	defer b.Close()
	invalid(b.Publish(t.Context(), "e", elect.Leader{Node: "a"}, 0), "token 0 is not positive")
	invalid(b.Publish(t.Context(), "e", elect.Leader{Node: "a", Token: 1}, 0), "ttl 0s is shorter than 1ms")
}
