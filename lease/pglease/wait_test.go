package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/rowleasetest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
)

// greedy runs a holder that loops Hold → 5ms of work → Release on key
// until ctx ends, and reports each grant on granted. Its error, at the end,
// on done.
func greedy(ctx context.Context, l aegis.Locker, key string, granted chan<- aegis.Token) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			h, err := aegis.Hold(ctx, l, key, 5*time.Second)
			if err != nil {
				if ctx.Err() != nil {
					err = nil
				}
				done <- err
				return
			}
			select {
			case granted <- h.Token():
			default:
			}
			select {
			case <-time.After(5 * time.Millisecond): // the holder's work
			case <-ctx.Done():
			}
			if err := h.Release(context.WithoutCancel(ctx)); err != nil {
				done <- err
				return
			}
		}
	}()
	return done
}

// TestWaiterUnderGreedyHolder: a holder that releases and at once asks
// again (another pool: another process) must not keep a waiter out. Before
// the queue, the waiter got the key only when its poll fell into the
// holder's gap of one round trip: seconds, sometimes tens.
func TestWaiterUnderGreedyHolder(t *testing.T) {
	t.Parallel()
	holder, err := pglease.New(pool(t), nil)
	require.NoError(t, err)
	waiter, err := pglease.New(pool(t), nil)
	require.NoError(t, err)
	waitUnderGreedy(t, holder, waiter)
}

// waitUnderGreedy asserts that waiter gets the key within a bound, five
// times in a row, while holder loops greedily on it.
func waitUnderGreedy(t *testing.T, holder, waiter aegis.Locker) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	key := "greedy/" + strings.ReplaceAll(t.Name(), "/", "_")
	gctx, stop := context.WithCancel(ctx)
	granted := make(chan aegis.Token, 1)
	done := greedy(gctx, holder, key, granted)
	defer func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err, "the greedy holder failed")
		case <-time.After(10 * time.Second):
			t.Error("the greedy holder did not stop within 10s")
		}
	}()
	const bound = time.Second
	var last aegis.Token
	for round := range 5 {
		// Wait for a grant of the greedy holder after the waiter's last
		// one: the waiter then asks while the holder is in its loop.
		for {
			select {
			case tok := <-granted:
				if tok <= last {
					continue
				}
			case err := <-done:
				t.Fatalf("round %d: the greedy holder ended: %v", round, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the greedy holder got no grant within 10s", round)
			}
			break
		}
		start := time.Now()
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		lease, err := aegis.Acquire(actx, waiter, key, 5*time.Second)
		acancel()
		waited := time.Since(start)
		require.NoError(t, err, "round %d: the waiter did not get the key in 10s", round)
		require.Less(t, waited, bound, "round %d: the waiter waited %s under a greedy holder", round, waited)
		require.Greater(t, lease.Token, last)
		last = lease.Token
		require.NoError(t, waiter.Release(ctx, lease))
	}
}

// TestNotifyWakesOnRelease: a release through another Locker (another
// pool) wakes a subscriber while a waiter is queued for the key.
func TestNotifyWakesOnRelease(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	a, err := pglease.New(p, nil)
	require.NoError(t, err)
	b, err := pglease.New(schemaPool(t, p), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	held, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)

	wake, stopWake, err := b.Notify(ctx, "k")
	require.NoError(t, err)
	defer stopWake()
	got := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (n int, err error) {
		err = p.QueryRow(ctx, "SELECT count(*) FROM aegis_lease_waiter WHERE key = 'k'").Scan(&n)
		return n, err
	})
	_, err = a.TryAcquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, a.Release(ctx, held))
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up within 5s of the release")
	}
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the key within 10s of the release")
	}
	var n int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM aegis_lease_waiter").Scan(&n))
	require.Zero(t, n, "a granted waiter leaves the queue")
	again, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err, "TryAcquire refused for a queue that is gone")
	require.NoError(t, a.Release(ctx, again))
	_, _, err = b.Notify(ctx, "")
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

// TestCrashedWaiterBlocksBriefly: a queue entry nobody refreshes (its
// waiter crashed) holds up the key for at most its expiry.
func TestCrashedWaiterBlocksBriefly(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	a, err := pglease.New(p, nil)
	require.NoError(t, err)
	rowleasetest.CrashedWaiterBlocksBriefly(t, a, "k", func(ctx context.Context) error {
		if _, err := p.Exec(ctx, `INSERT INTO aegis_lease_waiter (key, waiter, since, expires_at) VALUES ('k', 'dead', now(), now() + interval '1 second')`); err != nil {
			return err
		}
		_, err := p.Exec(ctx, `UPDATE aegis_lease SET queue_until = now() + interval '1 second' WHERE key = 'k'`)
		return err
	})
}

// TestUpgradeFromVersion1: a lease table created before the queue and the
// holder names is upgraded by New, and its tokens go on from where they
// were.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, stmt := range []string{
		`CREATE TABLE aegis_migrations (component text NOT NULL, version integer NOT NULL, PRIMARY KEY (component, version))`,
		`INSERT INTO aegis_migrations VALUES ('pglease:aegis_lease', 1)`,
		`CREATE TABLE aegis_lease (key text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL, granted_at timestamptz NOT NULL)`,
		`INSERT INTO aegis_lease VALUES ('k', 'old', 41, '-infinity', now())`,
	} {
		_, err := p.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	l, err := pglease.New(p, &pglease.Config{Holder: "upgraded"})
	require.NoError(t, err)
	require.Empty(t, holderOf(t, p, "k"), "a grant made before holder names has none")
	lease, err := aegis.Acquire(ctx, l, "k", time.Minute)
	require.NoError(t, err)
	require.Equal(t, aegis.Token(42), lease.Token)
	require.Equal(t, "upgraded", holderOf(t, p, "k"))
	var version int
	require.NoError(t, p.QueryRow(ctx, `SELECT max(version) FROM aegis_migrations WHERE component = 'pglease:aegis_lease'`).Scan(&version))
	require.Equal(t, 4, version)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	for name, cfg := range map[string]*pglease.Config{
		"bad name":  {Table: "bad name"},
		"two dots":  {Table: "a.b.c"},
		"too long":  {Table: strings.Repeat("x", 57)},
		"long part": {Table: "s." + strings.Repeat("x", 57)},
	} {
		_, err := pglease.New(p, cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, name)
		require.ErrorContains(t, err, "Config.Table", name)
		require.ErrorIs(t, pglease.Migrate(t.Context(), p, cfg), aegis.ErrInvalid, name)
	}
	_, err := pglease.New(p, &pglease.Config{Table: strings.Repeat("x", 56)})
	require.NoError(t, err, "56 characters fit")
	_, err = pglease.New(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "pool is nil")
	err = pglease.Migrate(t.Context(), nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.False(t, errors.Is(err, aegis.ErrHeld))
}

// schemaPool is a second pool on p's schema: another process on the same
// tables.
func schemaPool(t *testing.T, p *pgxpool.Pool) *pgxpool.Pool {
	q, err := pgxpool.NewWithConfig(context.Background(), p.Config())
	require.NoError(t, err)
	t.Cleanup(q.Close)
	return q
}

// TestNotifyConnectionLost: when the listening connection dies, every
// subscriber's channel is closed (aegis.Acquire then polls), a waiter
// still gets the key, and the next Notify listens on a new connection.
func TestNotifyConnectionLost(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	a, err := pglease.New(p, nil)
	require.NoError(t, err)
	b, err := pglease.New(schemaPool(t, p), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wake, stop, err := b.Notify(ctx, "k")
	require.NoError(t, err)
	defer stop()
	var oid uint32
	require.NoError(t, p.QueryRow(ctx, "SELECT 'aegis_lease'::regclass::oid").Scan(&oid))
	listen := fmt.Sprintf(`LISTEN "aegis_lease_%d"`, oid)
	var killed bool
	require.NoError(t, p.QueryRow(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", listen).Scan(&killed))
	require.True(t, killed)
	select {
	case _, ok := <-wake:
		require.False(t, ok, "a wake-up instead of a closed channel")
	case <-time.After(10 * time.Second):
		t.Fatal("the channel was not closed within 10s of its connection's end")
	}

	held, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	wake2, stop2, err := b.Notify(ctx, "k")
	require.NoError(t, err, "Notify after a lost connection")
	defer stop2()
	got := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (n int, err error) {
		err = p.QueryRow(ctx, "SELECT count(*) FROM aegis_lease_waiter WHERE key = 'k'").Scan(&n)
		return n, err
	})
	require.NoError(t, a.Release(ctx, held))
	select {
	case _, ok := <-wake2:
		require.True(t, ok, "the new subscription's channel was closed")
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up on the new connection within 5s of the release")
	}
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the key within 10s of its release")
	}
}

// TestSchemaQualifiedTable: a table named schema.table gets its waiter
// table in the same schema, and waiting works there.
func TestSchemaQualifiedTable(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var schema string
	require.NoError(t, p.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	cfg := &pglease.Config{Table: schema + ".locks"}
	a, err := pglease.New(p, cfg)
	require.NoError(t, err)
	b, err := pglease.New(schemaPool(t, p), cfg)
	require.NoError(t, err)
	held, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	got := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (n int, err error) {
		err = p.QueryRow(ctx, "SELECT count(*) FROM locks_waiter WHERE key = 'k'").Scan(&n)
		return n, err
	})
	require.NoError(t, a.Release(ctx, held))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the key within 10s of its release")
	}
}

// TestLostNamesTheKey: ErrLost from Renew and Release says which key and
// what it means, and still matches errors.Is.
func TestLostNamesTheKey(t *testing.T) {
	t.Parallel()
	l, err := pglease.New(testenv.Postgres(t), nil)
	require.NoError(t, err)
	ctx := t.Context()
	lease, err := l.TryAcquire(ctx, "jobs/export", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, lease))
	for name, err := range map[string]error{"renew": l.Renew(ctx, lease, time.Minute), "release": l.Release(ctx, lease)} {
		require.ErrorIs(t, err, aegis.ErrLost, name)
		require.ErrorContains(t, err, `pglease: `+name+` "jobs/export"`, name)
		require.ErrorContains(t, err, "released, expired or granted to another owner", name)
	}
}

// TestListeningConnectionGoesBackToThePool: the connection a wait listens
// on returns to the pool, no longer listening, when the wait ends; the pool
// does not dial a new backend per wait (it did while the connection was
// closed instead, which put a backend's start on the next handoff's path).
func TestListeningConnectionGoesBackToThePool(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	cfg := p.Config()
	cfg.MaxConns = 3
	bp, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(bp.Close)
	a, err := pglease.New(p, nil)
	require.NoError(t, err)
	b, err := pglease.New(bp, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const rounds = 10
	for round := range rounds {
		held, err := a.TryAcquire(ctx, "k", time.Minute)
		require.NoError(t, err, "round %d", round)
		got := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (n int, err error) {
			err = p.QueryRow(ctx, "SELECT count(*) FROM aegis_lease_waiter WHERE key = 'k'").Scan(&n)
			return n, err
		})
		require.NoError(t, a.Release(ctx, held), "round %d", round)
		select {
		case err := <-got:
			require.NoError(t, err, "round %d", round)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the waiter did not get the key within 10s of the release", round)
		}
	}
	require.LessOrEqual(t, bp.Stat().NewConnsCount(), int64(cfg.MaxConns), "the pool dialed a backend per wait")
	// Every connection of the pool at once: none still listens.
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range bp.Stat().TotalConns() {
		c, err := bp.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		var channels int
		require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM pg_listening_channels()").Scan(&channels))
		require.Zero(t, channels, "a pooled connection still listens")
	}
}
