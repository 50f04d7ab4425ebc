package gocronadapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/testing/testenv"
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

// Every caller mistake is an error that matches aegis.ErrInvalid and names
// the argument or field.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	l := locker(t, url)
	invalid := func(err error, want string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrInvalid, want)
		require.ErrorContains(t, err, want)
	}
	for _, tc := range []struct {
		l    aegis.Locker
		cfg  *gocronadapter.LockerConfig
		want string
	}{
		{nil, nil, "gocronadapter: NewLocker: locker is nil"},
		{l, &gocronadapter.LockerConfig{LockAtMostFor: -time.Second}, "LockerConfig.LockAtMostFor -1s is not positive"},
		{l, &gocronadapter.LockerConfig{LockAtLeastFor: -time.Second}, "LockerConfig.LockAtLeastFor -1s is negative"},
		{l, &gocronadapter.LockerConfig{LockAtMostFor: time.Second, LockAtLeastFor: 2 * time.Second}, "LockerConfig.LockAtLeastFor 2s is longer than LockAtMostFor 1s"},
		{l, &gocronadapter.LockerConfig{LockAtMostFor: 48 * time.Hour}, "LockerConfig.LockAtMostFor"},
	} {
		_, err := gocronadapter.NewLocker(tc.l, tc.cfg)
		invalid(err, tc.want)
	}

	// A nil election used to be accepted, and the campaign goroutine then
	// crashed the process.
	_, err := gocronadapter.NewElector(t.Context(), nil)
	invalid(err, "gocronadapter: NewElector: election is nil")
	e, err := elect.New(l, "gocron-config", nil)
	require.NoError(t, err)
	//lint:ignore SA1012 a nil ctx is the mistake under test
	_, err = gocronadapter.NewElector(nil, e)
	invalid(err, "gocronadapter: NewElector: ctx is nil")
}

// refusing is a real store that refuses the election's grant as bad input,
// as a backend does for a TTL or key it cannot serve.
type refusing struct{ aegis.Locker }

func (refusing) TryAcquire(context.Context, string, time.Duration) (*aegis.Lease, error) {
	return nil, fmt.Errorf("%w: ttl not supported by this store", aegis.ErrInvalid)
}

// An Elector whose campaign stopped on bad input says why, instead of
// answering "not the leader" forever.
func TestElectorCampaignError(t *testing.T) {
	t.Parallel()
	e, err := elect.New(refusing{locker(t, testenv.PostgresURL(t))}, "gocron-refused", &elect.Config{TTL: time.Second})
	require.NoError(t, err)
	el, err := gocronadapter.NewElector(t.Context(), e)
	require.NoError(t, err)
	t.Cleanup(el.Close)
	require.Eventually(t, func() bool { return errors.Is(el.IsLeader(t.Context()), aegis.ErrInvalid) }, 10*time.Second, 10*time.Millisecond,
		"IsLeader reports the campaign's error")
	err = el.IsLeader(t.Context())
	require.ErrorIs(t, err, gocronadapter.ErrNotLeader)
	require.ErrorContains(t, err, "ttl not supported by this store")
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
		el, err := gocronadapter.NewElector(context.Background(), e)
		require.NoError(t, err)
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
