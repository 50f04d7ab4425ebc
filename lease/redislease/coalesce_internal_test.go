package redislease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/redisscript"
	"github.com/aegislab/aegis/internal/testing/losstest"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

func newTestLocker(t *testing.T) (*Locker, *redis.Client, string) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	t.Cleanup(func() { _ = c.Close() })
	prefix := "aegis-test:" + testenv.Key(t) + ":"
	l, err := New(c, &Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l, c, prefix
}

// TestCoalescedCallsKeepExclusion: many goroutines of one Locker (so most
// calls travel in shared pipelines) guard a read-modify-write with one key;
// any overlap would lose an increment.
func TestCoalescedCallsKeepExclusion(t *testing.T) {
	t.Parallel()
	l, _, _ := newTestLocker(t)
	losstest.Contend(t, l, 24, 15, time.Minute)
}

// TestAbandonedGrantsAreReleased: callers that give up (their context
// ends) while their grant is queued or in flight leave nothing held: a
// grant that lands after its caller left is released by the coalescer.
func TestAbandonedGrantsAreReleased(t *testing.T) {
	t.Parallel()
	l, raw, prefix := newTestLocker(t)
	ctx := t.Context()
	var (
		abandoned atomic.Int64
		wg        sync.WaitGroup
	)
	const goroutines, rounds = 16, 60
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("k-%d-%d", g, i)
				cctx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(300))*time.Microsecond)
				lease, err := l.TryAcquire(cctx, key, time.Minute)
				cancel()
				switch {
				case err == nil:
					if err := l.Release(ctx, lease); err != nil {
						t.Error(err)
					}
				case errors.Is(err, context.DeadlineExceeded):
					abandoned.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	testenv.Wait(t, &wg, time.Minute, "the abandoning goroutines")
	require.NoError(t, l.Close(), "Close waits until the coalescer released what landed late")
	t.Logf("%d of %d attempts gave up; %d grants landed after their caller left", abandoned.Load(), goroutines*rounds, l.co.Undone())
	keys, err := raw.Keys(ctx, "{"+prefix+"k-*}").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "every abandoned grant was released")
}

// TestCloseWhileQueued: Close, while calls are queued, fails none of them.
func TestCloseWhileQueued(t *testing.T) {
	t.Parallel()
	l, _, _ := newTestLocker(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 32*20)
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				lease, err := l.TryAcquire(ctx, fmt.Sprint(g, "/", i), time.Minute)
				if err == nil {
					err = l.Release(ctx, lease)
				}
				errs <- err
			}
		})
	}
	require.NoError(t, l.Close())
	testenv.Wait(t, &wg, time.Minute, "the calls queued at Close")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestImpatientSendersStrandNobody: callers whose context ends at random
// moments, some of them chosen to send the next pipeline, beside patient
// callers of the same Locker: every patient call completes, and every
// grant of an impatient caller that landed is released.
func TestImpatientSendersStrandNobody(t *testing.T) {
	t.Parallel()
	l, raw, prefix := newTestLocker(t)
	ctx := t.Context()
	var (
		wg      sync.WaitGroup
		patient atomic.Int64
	)
	const goroutines, rounds = 16, 40
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("k-%d-%d", g, i)
				cctx, cancel := ctx, context.CancelFunc(func() {})
				if g%2 == 1 {
					cctx, cancel = context.WithTimeout(ctx, time.Duration(rand.N(200))*time.Microsecond)
				}
				lease, err := l.TryAcquire(cctx, key, time.Minute)
				cancel()
				switch {
				case err == nil:
					if err := l.Release(ctx, lease); err != nil {
						t.Error(err)
					}
					if g%2 == 0 {
						patient.Add(1)
					}
				case g%2 == 1 && errors.Is(err, context.DeadlineExceeded):
				default:
					t.Errorf("goroutine %d: %v", g, err)
				}
			}
		})
	}
	testenv.Wait(t, &wg, time.Minute, "the patient and impatient goroutines")
	require.EqualValues(t, goroutines/2*rounds, patient.Load(), "every patient call was granted and released")
	keys, err := raw.Keys(ctx, "{"+prefix+"k-*}").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "every grant was released, by its caller or by the sender that saw its caller gone")
}

// TestRunAllFallsBackToEval: the calls of a pipeline that the server
// refuses with NOSCRIPT are sent again by EVAL, and the replies stay in
// order.
func TestRunAllFallsBackToEval(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r, err := servers.StartRedis(ctx, filepath.Join(t.TempDir(), "redis"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	raw := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	lock := redisscript.LockFor("p:", "fallback")
	calls := []redisscript.Call{
		redisscript.AcquireCall(lock, "v", time.Minute),
		redisscript.RenewCall(lock, "v", 1, time.Minute),
		redisscript.ReleaseCall(lock, "v", 1),
		redisscript.AcquireCall(lock, "w", time.Minute),
	}
	cmds := redisscript.RunAll(ctx, raw, calls)
	token, _, err := redisscript.AcquireReply(cmds[0])
	require.NoError(t, err)
	require.EqualValues(t, 1, token)
	for _, cmd := range cmds[1:3] {
		out, err := redisscript.Result(cmd)
		require.NoError(t, err)
		require.Equal(t, redisscript.Done, out)
	}
	token, _, err = redisscript.AcquireReply(cmds[3])
	require.NoError(t, err)
	require.EqualValues(t, 2, token, "in order: after the release")
	stats := raw.Info(ctx, "commandstats").Val()
	require.Contains(t, stats, "cmdstat_eval:calls=4,", "a fresh server: every call went again by EVAL")
}

// TestAcquireResentReturnsItsGrant: a grant whose reply was lost and whose
// call is sent again (go-redis retries after network errors) returns the
// same token, not "held"; another owner still gets "held".
func TestAcquireResentReturnsItsGrant(t *testing.T) {
	t.Parallel()
	_, raw, prefix := newTestLocker(t)
	ctx := t.Context()
	lock := redisscript.LockFor(prefix, "resent")
	first, _, err := redisscript.Acquire(ctx, raw, lock, "call-1", time.Minute)
	require.NoError(t, err)
	again, _, err := redisscript.Acquire(ctx, raw, lock, "call-1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, first, again)
	other, left, err := redisscript.Acquire(ctx, raw, lock, "call-2", time.Minute)
	require.NoError(t, err)
	require.Zero(t, other, "held")
	require.Greater(t, left, 50*time.Second)
}
