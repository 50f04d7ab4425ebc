package gocronadapter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/schedule/gocronadapter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func locker(t *testing.T, url string) aegis.Locker {
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	l, err := pglease.New(pool, nil)
	require.NoError(t, err)
	return l
}

func TestLockerConfig(t *testing.T) {
	t.Parallel()
	l := locker(t, testenv.PostgresURL(t))
	_, err := gocronadapter.NewLocker(nil, nil)
	require.ErrorContains(t, err, "locker is nil")
	_, err = gocronadapter.NewLocker(l, &gocronadapter.LockerConfig{LockAtMostFor: -time.Second})
	require.ErrorContains(t, err, "LockerConfig.LockAtMostFor -1s is not positive")
	_, err = gocronadapter.NewLocker(l, &gocronadapter.LockerConfig{LockAtMostFor: time.Second, LockAtLeastFor: 2 * time.Second})
	require.ErrorContains(t, err, "LockerConfig.LockAtLeastFor 2s is longer than LockAtMostFor 1s")
	_, err = gocronadapter.NewLocker(l, &gocronadapter.LockerConfig{LockAtMostFor: 48 * time.Hour})
	require.ErrorContains(t, err, "LockerConfig.LockAtMostFor")
}

// The Locker's lock excludes a second scheduler until Unlock, or until
// LockAtLeastFor after the start when the job ended early.
func TestLockerSemantics(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	a, err := gocronadapter.NewLocker(locker(t, url), &gocronadapter.LockerConfig{LockAtMostFor: 2 * time.Second, LockAtLeastFor: 500 * time.Millisecond})
	require.NoError(t, err)
	b, err := gocronadapter.NewLocker(locker(t, url), nil)
	require.NoError(t, err)
	ctx := t.Context()
	lk, err := a.Lock(ctx, "report")
	require.NoError(t, err)
	_, err = b.Lock(ctx, "report")
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, lk.Unlock(ctx)) // early: kept until 500ms after the start
	_, err = b.Lock(ctx, "report")
	require.ErrorIs(t, err, aegis.ErrHeld, "lockAtLeastFor keeps it")
	require.Eventually(t, func() bool {
		lk, err := b.Lock(ctx, "report")
		if err == nil {
			require.NoError(t, lk.Unlock(ctx))
		}
		return err == nil
	}, 3*time.Second, 20*time.Millisecond)
}

// Two gocron schedulers with the Locker never run the job at once.
func TestGocronWithLocker(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	var active, peak, runs atomic.Int32
	for range 2 {
		l, err := gocronadapter.NewLocker(locker(t, url), &gocronadapter.LockerConfig{LockAtMostFor: 2 * time.Second, KeepAlive: true})
		require.NoError(t, err)
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		require.NoError(t, err)
		_, err = s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(func() {
			n := active.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(150 * time.Millisecond)
			active.Add(-1)
			runs.Add(1)
		}), gocron.WithName("report"))
		require.NoError(t, err)
		s.Start()
		t.Cleanup(func() { require.NoError(t, s.Shutdown()) })
	}
	require.Eventually(t, func() bool { return runs.Load() >= 5 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int32(1), peak.Load())
}

// One of two Electors leads; when it closes, the other does, with a
// greater term token.
func TestElector(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	var els []*gocronadapter.Elector
	for _, node := range []string{"a", "b"} {
		e, err := elect.New(locker(t, url), "gocron", &elect.Config{Node: node, TTL: 500 * time.Millisecond})
		require.NoError(t, err)
		el := gocronadapter.NewElector(context.Background(), e)
		t.Cleanup(el.Close)
		els = append(els, el)
	}
	leader := func() int {
		n, who := 0, -1
		for i, el := range els {
			if el.IsLeader(t.Context()) == nil {
				n, who = n+1, i
			}
		}
		if n > 1 {
			t.Fatal("two leaders")
		}
		return who
	}
	require.Eventually(t, func() bool { return leader() >= 0 }, 5*time.Second, 10*time.Millisecond)
	first := leader()
	tok := els[first].Leadership().Token()
	require.ErrorIs(t, els[1-first].IsLeader(t.Context()), gocronadapter.ErrNotLeader)
	els[first].Close()
	require.Eventually(t, func() bool { return leader() == 1-first }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, els[1-first].Leadership().Token(), tok)
}
