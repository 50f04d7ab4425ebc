package elect_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/elect/etcdboard"
	"github.com/aegislab/aegis/elect/redisboard"
	"github.com/aegislab/aegis/elect/zkboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// boardKind is one Board implementation under the shared suite. setup
// prepares a store for the test and returns how to open a handle on it:
// each call a handle of its own, as another process would have.
type boardKind struct {
	name   string
	pushes bool // a Watcher that can watch: Observe need not poll
	setup  func(t *testing.T) func() elect.Board
}

var boardKinds = []boardKind{
	{"postgres", true, func(t *testing.T) func() elect.Board {
		url := testenv.PostgresURL(t)
		return func() elect.Board {
			pool, err := pgxpool.New(context.Background(), url)
			require.NoError(t, err)
			db := stdlib.OpenDBFromPool(pool)
			t.Cleanup(func() { db.Close(); pool.Close() })
			b, err := elect.NewSQLBoard(t.Context(), db, nil)
			require.NoError(t, err)
			return b
		}
	}},
	{"postgres-pool", true, func(t *testing.T) func() elect.Board {
		url := testenv.PostgresURL(t)
		return func() elect.Board {
			pool, err := pgxpool.New(context.Background(), url)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			b, err := elect.NewSQLBoardFromPool(t.Context(), pool, &elect.BoardConfig{Table: "leader_record"})
			require.NoError(t, err)
			return b
		}
	}},
	{"redis", true, func(t *testing.T) func() elect.Board {
		addr, prefix := testenv.RedisAddrs(t)[0], testenv.Key(t)+":"
		return func() elect.Board {
			client := redis.NewClient(&redis.Options{Addr: addr})
			b, err := redisboard.New(client, &redisboard.Config{Prefix: prefix})
			require.NoError(t, err)
			t.Cleanup(func() { b.Close(); client.Close() })
			return b
		}
	}},
	{"etcd", true, func(t *testing.T) func() elect.Board {
		endpoints, prefix := testenv.EtcdEndpoints(t), testenv.Key(t)+"/"
		return func() elect.Board {
			client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			require.NoError(t, err)
			t.Cleanup(func() { client.Close() })
			b, err := etcdboard.New(client, &etcdboard.Config{Prefix: prefix})
			require.NoError(t, err)
			return b
		}
	}},
	{"zookeeper", true, func(t *testing.T) func() elect.Board {
		servers, root := testenv.ZKServers(t), "/"+testenv.Key(t)
		return func() elect.Board {
			conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(quietZK{}))
			require.NoError(t, err)
			b, err := zkboard.New(conn, &zkboard.Config{Root: root})
			require.NoError(t, err)
			t.Cleanup(func() { b.Close(); conn.Close() })
			return b
		}
	}},
	{"sqlite", false, func(t *testing.T) func() elect.Board {
		path := filepath.Join(t.TempDir(), "board.db")
		return func() elect.Board {
			db, err := sqlitelease.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			b, err := elect.NewSQLBoard(t.Context(), db, nil)
			require.NoError(t, err)
			return b
		}
	}},
}

// quietZK silences go-zookeeper's log of its connections.
type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// readBoard is b.Read that fails the test on an error.
func readBoard(t *testing.T, b elect.Board, election string) elect.Leader {
	t.Helper()
	l, err := b.Read(t.Context(), election)
	require.NoError(t, err)
	return l
}

// The contract every Board keeps: a lower token is refused with
// aegis.ErrStale and changes nothing, a withdrawal of an earlier term is
// ignored, Read returns the live record only, and a Watcher wakes on a
// change made through another handle.
func TestBoardContract(t *testing.T) {
	t.Parallel()
	for _, kind := range boardKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			open := kind.setup(t)
			b, other := open(), open()
			ctx := t.Context()
			const e = "contract"
			since := time.UnixMicro(time.Now().UnixMicro())
			same := func(want, got elect.Leader) {
				t.Helper()
				require.Equal(t, want.Node, got.Node)
				require.Equal(t, want.Token, got.Token)
				require.True(t, want.Since.Equal(got.Since), "since %s, want %s", got.Since, want.Since)
			}

			require.Equal(t, elect.Leader{}, readBoard(t, b, e), "never published")
			a5 := elect.Leader{Node: "a", Token: 5, Since: since}
			require.NoError(t, b.Publish(ctx, e, a5, time.Minute))
			same(a5, readBoard(t, other, e))

			err := other.Publish(ctx, e, elect.Leader{Node: "old", Token: 4, Since: since}, time.Minute)
			require.ErrorIs(t, err, aegis.ErrStale, "a lower token")
			same(a5, readBoard(t, b, e))
			require.NoError(t, b.Publish(ctx, e, a5, time.Minute), "a refresh of the same term")

			b6 := elect.Leader{Node: "b", Token: 6, Since: since.Add(time.Second)}
			require.NoError(t, other.Publish(ctx, e, b6, time.Minute))
			require.NoError(t, b.Withdraw(ctx, e, 5), "a withdrawal of an earlier term")
			same(b6, readBoard(t, b, e))
			if er, ok := b.(elect.ExpiryReader); ok {
				l, left, err := er.ReadExpiry(ctx, e)
				require.NoError(t, err)
				same(b6, l)
				require.Greater(t, left, time.Duration(0))
				require.LessOrEqual(t, left, time.Minute)
			}
			require.NoError(t, other.Withdraw(ctx, e, 6))
			require.Equal(t, elect.Leader{}, readBoard(t, b, e), "withdrawn")
			require.ErrorIs(t, b.Publish(ctx, e, elect.Leader{Node: "old", Token: 5}, time.Minute), aegis.ErrStale,
				"a lower token than a withdrawn term's")

			c7 := elect.Leader{Node: "c", Token: 7, Since: since}
			require.NoError(t, b.Publish(ctx, e, c7, 200*time.Millisecond))
			require.Eventually(t, func() bool { return readBoard(t, other, e) == elect.Leader{} }, 10*time.Second, 10*time.Millisecond,
				"a record published for 200ms still live after 10s")
			require.Equal(t, elect.Leader{}, readBoard(t, other, "another-election"))

			w, ok := b.(elect.Watcher)
			if !ok {
				require.False(t, kind.pushes, "%T is not a Watcher", b)
				return
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			wake, err := w.Watch(wctx, e)
			if !kind.pushes {
				require.ErrorIs(t, err, errors.ErrUnsupported)
				return
			}
			require.NoError(t, err)
			require.NoError(t, other.Publish(ctx, e, elect.Leader{Node: "d", Token: 8, Since: since}, time.Minute))
			require.True(t, recvWake(t, wake, "a wake after another handle's Publish"), "the watch ended instead of waking")
			require.NoError(t, other.Withdraw(ctx, e, 8))
			require.True(t, recvWake(t, wake, "a wake after another handle's Withdraw"), "the watch ended instead of waking")
			stop()
			for recvWake(t, wake, "the watch's channel closed when its ctx ended") {
			}
		})
	}
}

// observing is an Observe of e for the test: it checks the first value is
// no leader, and its stop (also run when the test ends) cancels it and
// waits, bounded, for the channel to close.
func observing(t *testing.T, e *elect.Election) (ch <-chan elect.Leader, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := e.Observe(ctx)
	require.NoError(t, err)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for open := true; open; {
				select {
				case _, open = <-ch:
				case <-time.After(10 * time.Second):
					t.Error("Observe's channel was not closed within 10s of its ctx's end")
					return
				}
			}
		})
	}
	t.Cleanup(stop)
	require.Equal(t, elect.Leader{}, testenv.Recv(t, ch, 10*time.Second, "the first value (no leader yet)"))
	return ch, stop
}

// recvWake receives from wake within 10s, failing the test otherwise, and
// reports whether wake was still open.
func recvWake(t *testing.T, wake <-chan struct{}, what string) bool {
	t.Helper()
	select {
	case _, ok := <-wake:
		return ok
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		return false
	}
}

// Observe with Poll an hour, on a Board that pushes, sees a new leader, a
// resignation and a crashed leader's record expiring: nothing but the
// Board's push or the record's expiry can wake it within the test's bound
// (its TTL is a minute, so even a broken watch's polling, every TTL/3,
// would come too late). A Board that cannot push is polled at the default
// Poll and sees the same.
func TestObserveEveryBoard(t *testing.T) {
	t.Parallel()
	for _, kind := range boardKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			open := kind.setup(t)
			locker := memlease.New() // the lease's store; the record is the Board's
			cfg := &elect.Config{Node: "observer", TTL: time.Minute, Poll: time.Hour, Board: open()}
			if !kind.pushes {
				cfg.TTL, cfg.Poll = time.Second, 0 // polls every TTL/3
			}
			obs, err := elect.New(locker, "pushed", cfg)
			require.NoError(t, err)
			ch, stop := observing(t, obs)
			next := func(what string) elect.Leader {
				t.Helper()
				return testenv.Recv(t, ch, 10*time.Second, what+" observed (Poll "+cfg.Poll.String()+")")
			}

			// A long TTL: node-a's refreshes are never late enough, even on
			// a loaded machine, to let its record lapse (Resign ends it).
			a, err := elect.New(locker, "pushed", &elect.Config{Node: "node-a", TTL: 10 * time.Second, Board: open()})
			require.NoError(t, err)
			leadA := campaignWithin(t, t.Context(), a, 10*time.Second)
			got := next("node-a leading")
			require.Equal(t, "node-a", got.Node)
			require.Equal(t, leadA.Token(), got.Token)

			require.NoError(t, leadA.Resign(t.Context()))
			require.Equal(t, elect.Leader{}, next("node-a's resignation"))

			// A leader that crashed: its record, published once, is never
			// refreshed nor withdrawn, and expires.
			crashed := elect.Leader{Node: "crashed", Token: leadA.Token() + 1, Since: time.UnixMicro(time.Now().UnixMicro())}
			require.NoError(t, open().Publish(t.Context(), "pushed", crashed, 500*time.Millisecond))
			got = next("the crashed leader's record")
			require.Equal(t, "crashed", got.Node)
			require.Equal(t, elect.Leader{}, next("the crashed leader's record expiring"))
			stop()
		})
	}
}

// A watch whose connection is cut (the listening backend terminated) is
// made again: Observe, with Poll an hour and TTL a minute, still sees the
// next leader.
func TestObserveWatchesAgain(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	s := newStore(t, url)
	obs, err := elect.New(s.locker, "rewatched", &elect.Config{Node: "observer", TTL: time.Minute, Poll: time.Hour, Board: s.board})
	require.NoError(t, err)
	ch, _ := observing(t, obs)

	// The listener: the backend whose last statement is the board's LISTEN.
	listener := func() int32 {
		var pid int32
		err := s.pool.QueryRow(t.Context(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE query = 'LISTEN aegis_elect_' || 'aegis_leader'::regclass::oid`).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	var first int32
	require.Eventually(t, func() bool { first = listener(); return first != 0 }, 10*time.Second, 10*time.Millisecond,
		"no backend listens on the board's channel")
	var ok bool
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, first).Scan(&ok))
	require.True(t, ok)
	require.Eventually(t, func() bool { pid := listener(); return pid != 0 && pid != first }, 10*time.Second, 10*time.Millisecond,
		"the observer did not listen again after its connection was cut")

	lead := campaignWithin(t, t.Context(), candidate(t, newStore(t, url), "rewatched", "node-a", time.Second), 10*time.Second)
	got := testenv.Recv(t, ch, 10*time.Second, "the leader elected after the watch was cut")
	require.Equal(t, "node-a", got.Node)
	require.Equal(t, lead.Token(), got.Token)
	require.NoError(t, lead.Resign(t.Context()))
	require.Equal(t, elect.Leader{}, testenv.Recv(t, ch, 10*time.Second, "the resignation"))
}

// wrappedPgx is pgx's database/sql driver behind a wrapper, as another
// PostgreSQL driver would be: the Board cannot reach a pgx connection.
type wrappedPgx struct{ driver.Driver }

func (d wrappedPgx) Open(name string) (driver.Conn, error) {
	c, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	return struct{ driver.Conn }{c}, nil
}

var registerWrapped = sync.OnceFunc(func() { sql.Register("elect-wrapped-pgx", wrappedPgx{stdlib.GetDefaultDriver()}) })

// A SQLBoard on PostgreSQL through a driver other than pgx cannot LISTEN:
// Watch says so (errors.ErrUnsupported), and Observe polls it at the
// default Poll, saying so in its log.
func TestWatchNeedsPgx(t *testing.T) {
	t.Parallel()
	registerWrapped()
	db, err := sql.Open("elect-wrapped-pgx", testenv.PostgresURL(t))
	require.NoError(t, err)
	defer db.Close()
	b, err := elect.NewSQLBoard(t.Context(), db, nil)
	require.NoError(t, err)
	_, err = b.Watch(t.Context(), "e")
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorContains(t, err, "the *sql.DB's driver is not pgx")

	var log testenv.Buffer
	obs, err := elect.New(memlease.New(), "e", &elect.Config{TTL: time.Second, Board: b, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	ch, _ := observing(t, obs)
	require.NoError(t, b.Publish(t.Context(), "e", elect.Leader{Node: "a", Token: 1}, time.Minute))
	require.Equal(t, "a", testenv.Recv(t, ch, 10*time.Second, "the leader, polled every TTL/3").Node)
	require.Contains(t, log.String(), "the Board cannot push; polling")
}

// TestWatchUsesThePoolsHooks: the listening connection of a board made
// from a pool is made as the pool's are, with its BeforeConnect and
// AfterConnect (which set a rotated password, a role or a search_path).
func TestWatchUsesThePoolsHooks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	require.NoError(t, err)
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.RuntimeParams["application_name"] = "aegis-before"
		return nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT set_config('application_name', current_setting('application_name') || '-after', false)`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	table := "aegis_leader_hooks_" + fmt.Sprint(time.Now().UnixNano())
	board, err := elect.NewSQLBoardFromPool(ctx, pool, &elect.BoardConfig{Table: table})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = board.Watch(wctx, "hooked")
	require.NoError(t, err)
	var app string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(application_name), '') FROM pg_stat_activity
		WHERE query = 'LISTEN aegis_elect_' || $1::regclass::oid`, table).Scan(&app))
	require.Equal(t, "aegis-before-after", app, "the listening connection was made with the pool's BeforeConnect, then AfterConnect")
}
