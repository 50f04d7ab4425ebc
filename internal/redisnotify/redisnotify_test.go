package redisnotify_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/redisnotify"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T, linger time.Duration) (*redis.Client, *redisnotify.Hub) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	t.Cleanup(func() { _ = c.Close() })
	h := redisnotify.New(func() *redis.PubSub { return c.Subscribe(context.Background()) }, linger)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return c, h
}

func woken(t *testing.T, wake <-chan struct{}, why string) {
	t.Helper()
	select {
	case _, ok := <-wake:
		require.True(t, ok, "%s: the channel was closed, not signalled", why)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not woken", why)
	}
}

func numSub(t *testing.T, c *redis.Client, channel string) int64 {
	return c.PubSubNumSub(t.Context(), channel).Val()[channel]
}

// TestFanOut: one message wakes every waiter of its channel and none of
// another channel.
func TestFanOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, h := setup(t, time.Minute)
	ch, other := testenv.Key(t), testenv.Key(t)
	var wakes []<-chan struct{}
	for range 5 {
		w, stop, err := h.Notify(ctx, ch)
		require.NoError(t, err)
		defer stop()
		wakes = append(wakes, w)
	}
	ow, stop, err := h.Notify(ctx, other)
	require.NoError(t, err)
	defer stop()
	require.EqualValues(t, 1, numSub(t, c, ch), "one subscription for five waiters")

	require.NoError(t, c.Publish(ctx, ch, "").Err())
	for _, w := range wakes {
		woken(t, w, "a waiter of the channel")
	}
	require.NoError(t, c.Publish(ctx, other, "").Err())
	woken(t, ow, "the other channel's waiter")
	for _, w := range wakes {
		require.Empty(t, w, "woken by another channel's message")
	}
}

// TestIdleChannelsAreUnsubscribed: a channel without waiters is dropped
// after linger, and a new waiter subscribes it again and is woken.
func TestIdleChannelsAreUnsubscribed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, h := setup(t, 20*time.Millisecond)
	ch := testenv.Key(t)
	_, stop, err := h.Notify(ctx, ch)
	require.NoError(t, err)
	require.EqualValues(t, 1, numSub(t, c, ch))
	stop()
	stop() // stopping twice is harmless
	require.Eventually(t, func() bool { return numSub(t, c, ch) == 0 }, 10*time.Second, 5*time.Millisecond)

	// Many rounds of subscribe, leave, come back: the channel always ends
	// subscribed while a waiter is registered.
	for range 20 {
		w, stop, err := h.Notify(ctx, ch)
		require.NoError(t, err)
		require.EqualValues(t, 1, numSub(t, c, ch))
		require.NoError(t, c.Publish(ctx, ch, "").Err())
		woken(t, w, "after resubscribing")
		stop()
	}
}

// TestExpires wakes the waiters of a channel after the given time, with no
// message.
func TestExpires(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, h := setup(t, time.Minute)
	ch := testenv.Key(t)
	h.Expires(ch, 0) // no waiter: nothing to do
	w, stop, err := h.Notify(ctx, ch)
	require.NoError(t, err)
	defer stop()
	h.Expires(ch, time.Hour)
	h.Expires(ch, 50*time.Millisecond) // the earlier one wins
	woken(t, w, "after the expiry")
}

// TestConcurrentWaiters: many goroutines subscribe, leave and publish on a
// few channels at once (run with -race).
func TestConcurrentWaiters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, h := setup(t, 5*time.Millisecond)
	chans := []string{testenv.Key(t), testenv.Key(t), testenv.Key(t)}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			ch := chans[i%len(chans)]
			for range 20 {
				w, stop, err := h.Notify(ctx, ch)
				if !assertNoError(t, err) {
					return
				}
				if !assertNoError(t, c.Publish(ctx, ch, "").Err()) {
					return
				}
				select {
				case <-w:
				case <-time.After(10 * time.Second):
					t.Errorf("a waiter on %s was not woken by its own publish", ch)
				}
				stop()
			}
		})
	}
	testenv.Wait(t, &wg, time.Minute, "the waiters")
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestNotifyAfterClose(t *testing.T) {
	t.Parallel()
	_, h := setup(t, time.Minute)
	require.NoError(t, h.Close())
	_, _, err := h.Notify(t.Context(), "x")
	require.ErrorIs(t, err, redisnotify.ErrClosed)
}

func TestNotifyCancelled(t *testing.T) {
	t.Parallel()
	_, h := setup(t, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := h.Notify(ctx, testenv.Key(t))
	require.ErrorIs(t, err, context.Canceled)
}

// TestRefusedSubscription: a SUBSCRIBE the server refuses (a user without
// the channel's permission) fails that Notify as soon as the refusal
// arrives, with the server's error; subscriptions sent before and after
// it, on channels the user may use, are not mistaken for it.
func TestRefusedSubscription(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	t.Cleanup(func() { _ = admin.Close() })
	user, allowed := "aegis-notify-"+testenv.Key(t), "ok:"+testenv.Key(t)+":"
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+user, "resetchannels", "&"+allowed+"*", "-@all", "+subscribe", "+unsubscribe", "+ping").Err())
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0], Username: user, Password: user})
	t.Cleanup(func() { _ = c.Close() })
	h := redisnotify.New(func() *redis.PubSub { return c.Subscribe(context.Background()) }, time.Minute)
	t.Cleanup(func() { require.NoError(t, h.Close()) })

	// Allowed and refused channels at once, so that replies interleave.
	const n = 12
	type result struct {
		channel string
		wake    <-chan struct{}
		err     error
		took    time.Duration
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		ch := fmt.Sprint(allowed, i)
		if i%2 == 1 {
			ch = fmt.Sprint("refused:", testenv.Key(t), ":", i)
		}
		wg.Go(func() {
			start := time.Now()
			w, _, err := h.Notify(ctx, ch)
			results <- result{ch, w, err, time.Since(start)}
		})
	}
	testenv.Wait(t, &wg, time.Minute, "the Notify calls")
	close(results)
	for r := range results {
		if strings.HasPrefix(r.channel, "refused:") {
			require.ErrorContains(t, r.err, fmt.Sprintf("SUBSCRIBE %q refused: NOPERM", r.channel))
			require.Less(t, r.took, time.Second, "refused at once, not after the confirmation bound")
			continue
		}
		require.NoError(t, r.err, r.channel)
		require.EqualValues(t, 1, numSub(t, admin, r.channel))
		require.NoError(t, admin.Publish(ctx, r.channel, "").Err())
		woken(t, r.wake, r.channel)
	}
	// A refused channel is forgotten: asking again is refused again.
	_, _, err := h.Notify(ctx, "refused:again")
	require.ErrorContains(t, err, "NOPERM")
}
