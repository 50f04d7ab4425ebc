package tracing_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/redislease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/tracing"
)

// store is a lease store and a store of record for the end-to-end test:
// two Lockers on the same store, as two processes have, and a fenced
// write of the business row.
type store struct {
	backend string
	a, b    aegis.Locker
	// write checks lease's token for resource and inserts a ledger row,
	// in one transaction.
	write func(ctx context.Context, resource string, lease aegis.Lease) error
	// ledger is the tokens of the rows written, in order.
	ledger func(t *testing.T) []int64
}

const ledgerSQL = `CREATE TABLE ledger (seq integer PRIMARY KEY, token bigint NOT NULL)`

// pgStore is the store of record on PostgreSQL: the fenced write (the
// fence and the business row in one transaction) and its ledger.
func pgStore(t *testing.T, pool *pgxpool.Pool) (func(ctx context.Context, resource string, lease aegis.Lease) error, func(t *testing.T) []int64) {
	require.NoError(t, fence.Migrate(t.Context(), pool))
	_, err := pool.Exec(t.Context(), `CREATE TABLE ledger (seq serial PRIMARY KEY, token bigint NOT NULL)`)
	require.NoError(t, err)
	write := func(ctx context.Context, resource string, lease aegis.Lease) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.CheckLease(ctx, tx, resource, lease); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO ledger (token) VALUES ($1)`, int64(lease.Token))
			return err
		})
	}
	ledger := func(t *testing.T) []int64 {
		rows, err := pool.Query(t.Context(), `SELECT token FROM ledger ORDER BY seq`)
		require.NoError(t, err)
		tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return tokens
	}
	return write, ledger
}

// stores are the real stores of the test: each Locker traced, with the
// name of the node that holds it.
var stores = []struct {
	name string
	open func(t *testing.T, tp trace.TracerProvider) store
}{
	{"pglease", func(t *testing.T, tp trace.TracerProvider) store {
		url := testenv.PostgresURL(t) // one schema: the two pools are two processes
		locker := func(node string) (aegis.Locker, *pgxpool.Pool) {
			pool, err := pgxpool.New(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			l, err := pglease.New(pool, nil)
			require.NoError(t, err)
			return tracing.Locker(l, tp, tracing.Node(node)), pool
		}
		a, pool := locker("node-a")
		b, _ := locker("node-b")
		write, ledger := pgStore(t, pool)
		return store{"pglease", a, b, write, ledger}
	}},
	{"sqlitelease", func(t *testing.T, tp trace.TracerProvider) store {
		path := filepath.Join(t.TempDir(), "aegis.db")
		locker := func(node string) (aegis.Locker, *sql.DB) {
			db, err := sqlitelease.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			l, err := sqlitelease.New(db, nil)
			require.NoError(t, err)
			return tracing.Locker(l, tp, tracing.Node(node)), db
		}
		a, db := locker("node-a")
		b, _ := locker("node-b")
		require.NoError(t, fence.MigrateSQL(t.Context(), db))
		_, err := db.ExecContext(t.Context(), ledgerSQL)
		require.NoError(t, err)
		write := func(ctx context.Context, resource string, lease aegis.Lease) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fence.CheckLeaseSQL(ctx, tx, resource, lease); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (token) VALUES ($1)`, int64(lease.Token)); err != nil {
				return err
			}
			return tx.Commit()
		}
		ledger := func(t *testing.T) []int64 {
			rows, err := db.QueryContext(t.Context(), `SELECT token FROM ledger ORDER BY seq`)
			require.NoError(t, err)
			defer rows.Close()
			var tokens []int64
			for rows.Next() {
				var tok int64
				require.NoError(t, rows.Scan(&tok))
				tokens = append(tokens, tok)
			}
			require.NoError(t, rows.Err())
			return tokens
		}
		return store{"sqlitelease", a, b, write, ledger}
	}},
	{"redislease", func(t *testing.T, tp trace.TracerProvider) store {
		addr := testenv.RedisAddrs(t)[0]
		locker := func(node string) aegis.Locker {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() })
			l, err := redislease.New(c, nil)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			return tracing.Locker(l, tp, tracing.Node(node))
		}
		write, ledger := pgStore(t, testenv.Postgres(t)) // the store of record is PostgreSQL
		return store{"redislease", locker("node-a"), locker("node-b"), write, ledger}
	}},
}

// TestFencedRefusalEndToEnd: holder A is granted a lease through a traced
// Locker and writes through the fence; its lease expires; B, waiting in
// aegis.Acquire, is granted the key with a greater token and writes; A's
// late write is refused by the fence and its renewal finds the lease
// lost. The spans, exported to the SDK's in-memory exporter, tell that
// story: in A's trace its grant (its token), its write, its refused write
// (status Error, the event aegis.fence.refused with A's token and B's)
// and its lost renewal; in B's its grant and its write; each a child of
// its holder's span, each with the key, the resource, the backend and the
// node. No span, event or status holds either lease's owner (for Redis,
// the secret that releases the lease). On PostgreSQL, SQLite and Redis
// (with the fence on PostgreSQL), real servers.
func TestFencedRefusalEndToEnd(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			st := s.open(t, tp)
			tracer := tp.Tracer("test")
			key := testenv.Key(t)
			resource := "ledger/" + key
			const ttl = 300 * time.Millisecond

			ctxA, holderA := tracer.Start(t.Context(), "holder A")
			leaseA, err := st.a.TryAcquire(ctxA, key, ttl)
			require.NoError(t, err)
			require.NoError(t, st.write(ctxA, resource, *leaseA), "A writes while it holds the key")

			// B waits in the store's queue (or on its wake-ups) until A's
			// lease, never renewed, expires.
			ctxB, holderB := tracer.Start(t.Context(), "holder B")
			wait, cancel := context.WithTimeout(ctxB, 30*time.Second)
			leaseB, err := aegis.Acquire(wait, st.b, key, time.Minute)
			cancel()
			require.NoError(t, err, "B is granted the key within 30s, once A's lease (ttl %s) expired", ttl)
			require.Greater(t, leaseB.Token, leaseA.Token)
			require.NoError(t, st.write(ctxB, resource, *leaseB))
			holderB.End()

			err = st.write(ctxA, resource, *leaseA)
			require.ErrorIs(t, err, aegis.ErrStale, "A's late write is refused")
			require.ErrorIs(t, st.a.Renew(ctxA, leaseA, ttl), aegis.ErrLost)
			holderA.End()
			require.NoError(t, st.b.Release(t.Context(), leaseB))
			require.Equal(t, []int64{int64(leaseA.Token), int64(leaseB.Token)}, st.ledger(t), "A's late write changed nothing")

			spans := exp.GetSpans()
			childrenOf := func(root trace.Span) []tracetest.SpanStub {
				var out []tracetest.SpanStub
				for _, sp := range spans {
					if sp.SpanContext.TraceID() == root.SpanContext().TraceID() && sp.SpanContext.SpanID() != root.SpanContext().SpanID() {
						require.Equal(t, root.SpanContext().SpanID(), sp.Parent.SpanID(), "%s is a child of its holder's span", sp.Name)
						out = append(out, sp)
					}
				}
				return out
			}
			names := func(ss []tracetest.SpanStub) []string {
				var out []string
				for _, sp := range ss {
					out = append(out, sp.Name)
				}
				return out
			}

			a := childrenOf(holderA)
			require.Equal(t, []string{"aegis.lease.acquire", "aegis.fence.check", "aegis.fence.check", "aegis.lease.renew"}, names(a), "holder A's trace")
			grant := attrs(a[0].Attributes)
			require.Equal(t, key, grant[tracing.AttrKey].AsString())
			require.Equal(t, int64(leaseA.Token), grant[tracing.AttrToken].AsInt64())
			require.Equal(t, st.backend, grant[tracing.AttrBackend].AsString())
			require.Equal(t, "node-a", grant[tracing.AttrNode].AsString())

			for _, check := range []tracetest.SpanStub{a[1], a[2]} {
				require.Equal(t, map[attribute.Key]attribute.Value{
					"aegis.fence.resource": attribute.StringValue(resource),
					"aegis.token":          attribute.Int64Value(int64(leaseA.Token)),
					"aegis.key":            attribute.StringValue(key),
				}, attrs(check.Attributes))
			}
			require.Equal(t, codes.Unset, a[1].Status.Code, "A's write while it held the key")
			require.Empty(t, a[1].Events)

			refused := a[2]
			require.Equal(t, codes.Error, refused.Status.Code)
			require.Len(t, refused.Events, 1)
			require.Equal(t, "aegis.fence.refused", refused.Events[0].Name)
			require.Equal(t, map[attribute.Key]attribute.Value{
				"aegis.token":         attribute.Int64Value(int64(leaseA.Token)),
				"aegis.fence.current": attribute.Int64Value(int64(leaseB.Token)),
			}, attrs(refused.Events[0].Attributes), "the refusal names the writer's token and the one the store held")

			renew := a[3]
			require.Equal(t, codes.Error, renew.Status.Code)
			require.Contains(t, renew.Status.Description, aegis.ErrLost.Error())
			require.Equal(t, int64(leaseA.Token), attrs(renew.Attributes)[tracing.AttrToken].AsInt64())

			b := childrenOf(holderB)
			require.GreaterOrEqual(t, len(b), 2, "holder B's trace: its grant and its write")
			write := b[len(b)-1]
			require.Equal(t, "aegis.fence.check", write.Name)
			require.Equal(t, int64(leaseB.Token), attrs(write.Attributes)[tracing.AttrToken].AsInt64())
			require.Equal(t, codes.Unset, write.Status.Code)
			got := b[len(b)-2]
			require.Contains(t, []string{"aegis.lease.wait", "aegis.lease.acquire"}, got.Name)
			require.Equal(t, int64(leaseB.Token), attrs(got.Attributes)[tracing.AttrToken].AsInt64(), "B's grant")
			require.Equal(t, "node-b", attrs(got.Attributes)[tracing.AttrNode].AsString())
			for _, sp := range b[:len(b)-2] {
				// A polling Acquire's refused attempts, before the grant.
				require.Equal(t, "aegis.lease.acquire", sp.Name)
				require.True(t, attrs(sp.Attributes)[tracing.AttrHeld].AsBool())
				require.Equal(t, codes.Unset, sp.Status.Code)
			}

			for _, sp := range spans {
				for _, owner := range []string{leaseA.Owner, leaseB.Owner} {
					requireNoOwner(t, sp.Snapshot(), owner)
				}
			}
		})
	}
}
