package fence_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/tracing"
)

func spanAttrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestCheckTraced: a check whose context carries a span is a child span,
// aegis.fence.check, with the resource and the token (and a lease's key);
// a refusal is status Error with the event aegis.fence.refused carrying
// the writer's token and the one the table held; a check whose context
// carries no span records nothing. On PostgreSQL (pgx and database/sql)
// and SQLite.
func TestCheckTraced(t *testing.T) {
	t.Parallel()
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	pool := testenv.Postgres(t)
	require.NoError(t, fence.Migrate(t.Context(), pool))
	require.NoError(t, fence.MigrateSQL(t.Context(), sqlite))
	pgSQL := testenv.PostgresSQL(t)
	require.NoError(t, fence.MigrateSQL(t.Context(), pgSQL))

	sqlCheck := func(db *sql.DB) func(ctx context.Context, resource string, lease aegis.Lease, withLease bool) error {
		return func(ctx context.Context, resource string, lease aegis.Lease, withLease bool) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if withLease {
				err = fence.CheckLeaseSQL(ctx, tx, resource, lease)
			} else {
				err = fence.CheckSQL(ctx, tx, resource, lease.Token)
			}
			if err != nil {
				return err
			}
			return tx.Commit()
		}
	}
	for _, tc := range []struct {
		name  string
		check func(ctx context.Context, resource string, lease aegis.Lease, withLease bool) error
	}{
		{"pgx", func(ctx context.Context, resource string, lease aegis.Lease, withLease bool) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if withLease {
					return fence.CheckLease(ctx, tx, resource, lease)
				}
				return fence.Check(ctx, tx, resource, lease.Token)
			})
		}},
		{"postgres-sql", sqlCheck(pgSQL)},
		{"sqlite", sqlCheck(sqlite)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			resource := testenv.Key(t)
			const owner = "c0ffee00c0ffee00c0ffee00c0ffee00"

			require.NoError(t, tc.check(t.Context(), resource, aegis.Lease{Key: "k", Token: 1, Owner: owner}, true), "no span in the context")
			require.Empty(t, rec.Ended(), "a context without a span traces nothing")

			ctx, root := tp.Tracer("test").Start(t.Context(), "write")
			require.NoError(t, tc.check(ctx, resource, aegis.Lease{Key: "k", Token: 5, Owner: owner}, true))
			err := tc.check(ctx, resource, aegis.Lease{Key: "k", Token: 4, Owner: owner}, true)
			require.ErrorIs(t, err, aegis.ErrStale)
			err = tc.check(ctx, resource, aegis.Lease{Token: 3}, false)
			require.ErrorIs(t, err, aegis.ErrStale)
			err = tc.check(ctx, "", aegis.Lease{Token: 3}, false)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			root.End()

			var checks []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "aegis.fence.check" {
					checks = append(checks, s)
				}
			}
			require.Len(t, checks, 4)
			for i, s := range checks {
				require.Equal(t, root.SpanContext().TraceID(), s.SpanContext().TraceID(), "check %d", i)
				require.Equal(t, root.SpanContext().SpanID(), s.Parent().SpanID(), "check %d is a child of the caller's span", i)
				for _, kv := range s.Attributes() {
					require.NotContains(t, kv.Value.String(), owner)
				}
				require.NotContains(t, s.Status().Description, owner)
			}

			ok := checks[0]
			require.Equal(t, map[attribute.Key]attribute.Value{
				"aegis.fence.resource": attribute.StringValue(resource),
				"aegis.token":          attribute.Int64Value(5),
				"aegis.key":            attribute.StringValue("k"),
			}, spanAttrs(ok.Attributes()))
			require.Equal(t, codes.Unset, ok.Status().Code)
			require.Empty(t, ok.Events())

			for i, want := range []struct{ writer, current int64 }{{4, 5}, {3, 5}} {
				s := checks[1+i]
				require.Equal(t, want.writer, spanAttrs(s.Attributes())[tracing.AttrToken].AsInt64())
				require.Equal(t, codes.Error, s.Status().Code)
				require.Equal(t, aegis.ErrStale.Error(), s.Status().Description)
				require.Len(t, s.Events(), 1)
				e := s.Events()[0]
				require.Equal(t, "aegis.fence.refused", e.Name)
				require.Equal(t, map[attribute.Key]attribute.Value{
					"aegis.token":         attribute.Int64Value(want.writer),
					"aegis.fence.current": attribute.Int64Value(want.current),
				}, spanAttrs(e.Attributes))
			}
			require.NotContains(t, spanAttrs(checks[2].Attributes()), tracing.AttrKey, "a bare token has no lease key")

			invalid := checks[3]
			require.Equal(t, codes.Error, invalid.Status().Code)
			require.Contains(t, invalid.Status().Description, "fence: resource is empty")
			require.Equal(t, "exception", invalid.Events()[0].Name)
		})
	}
}

// TestExecTraced: Exec and ExecSQL under a context with a span are a child
// span, aegis.fence.exec, with the resource a refusal is named
// (ExecResource) and the token of the scheduled run of the context; a
// refusal is status Error with the event aegis.fence.refused (the run's
// token, the held one not known: 0); without a span nothing is recorded.
// On PostgreSQL (pgx and database/sql) and SQLite.
func TestExecTraced(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	require.NoError(t, fence.Migrate(t.Context(), pool))
	pgSQL := testenv.PostgresSQL(t)
	require.NoError(t, fence.MigrateSQL(t.Context(), pgSQL))
	sqlite := sqliteStore(t)
	const create = `CREATE TABLE export (period text PRIMARY KEY, token bigint NOT NULL)`
	_, err := pool.Exec(t.Context(), create)
	require.NoError(t, err)
	const update = `UPDATE export SET token = $2 WHERE period = $1 AND token <= $2`
	sqlExec := func(db *sql.DB) func(ctx context.Context, token int64) (int64, error) {
		_, err := db.ExecContext(t.Context(), create)
		if err != nil && !strings.Contains(err.Error(), "already exists") { // pgSQL shares pool's schema
			require.NoError(t, err)
		}
		return func(ctx context.Context, token int64) (int64, error) {
			return fence.ExecSQL(ctx, db, update, "2026-12", token)
		}
	}
	for _, tc := range []struct {
		name string
		seed func() error
		exec func(ctx context.Context, token int64) (int64, error)
	}{
		{"pgx", func() error {
			_, err := pool.Exec(t.Context(), `INSERT INTO export VALUES ('2026-12', 5) ON CONFLICT (period) DO UPDATE SET token = 5`)
			return err
		}, func(ctx context.Context, token int64) (int64, error) {
			return fence.Exec(ctx, pool, update, "2026-12", token)
		}},
		{"postgres-sql", func() error {
			_, err := pgSQL.ExecContext(t.Context(), `INSERT INTO export VALUES ('2026-12', 5) ON CONFLICT (period) DO UPDATE SET token = 5`)
			return err
		}, sqlExec(pgSQL)},
		{"sqlite", func() error {
			_, err := sqlite.ExecContext(t.Context(), `INSERT INTO export VALUES ('2026-12', 5) ON CONFLICT (period) DO UPDATE SET token = 5`)
			return err
		}, sqlExec(sqlite)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.seed())
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			ctx, run := tp.Tracer("test").Start(t.Context(), "run")
			ctx, w, _ := inRun(ctx)
			ctx = trace.ContextWithSpan(ctx, run) // inRun's span context is replaced by run's

			n, err := tc.exec(ctx, 7) // 5 ≤ 7: written
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			_, err = tc.exec(ctx, 6) // 7 held: refused
			require.ErrorIs(t, err, aegis.ErrStale)
			_, err = tc.exec(t.Context(), 6) // no span: none recorded
			require.ErrorIs(t, err, aegis.ErrStale)
			run.End()

			spans := rec.Ended()
			require.Len(t, spans, 3, "two Execs and the run")
			for i, s := range spans[:2] {
				require.Equal(t, "aegis.fence.exec", s.Name())
				require.Equal(t, run.SpanContext().SpanID(), s.Parent().SpanID(), "a child of ctx's span")
				require.Equal(t, run.SpanContext().TraceID(), s.SpanContext().TraceID())
				a := spanAttrs(s.Attributes())
				require.Equal(t, fence.ExecResource(update), a[tracing.AttrResource].AsString())
				require.Equal(t, w.Token, a[tracing.AttrToken].AsInt64(), "the run's token")
				if i == 0 {
					require.Equal(t, codes.Unset, s.Status().Code)
					require.Empty(t, s.Events())
					continue
				}
				require.Equal(t, sdktrace.Status{Code: codes.Error, Description: aegis.ErrStale.Error()}, s.Status())
				require.Len(t, s.Events(), 1)
				e := s.Events()[0]
				require.Equal(t, tracing.EventRefused, e.Name)
				require.Equal(t, w.Token, spanAttrs(e.Attributes)[tracing.AttrToken].AsInt64())
				require.Zero(t, spanAttrs(e.Attributes)[tracing.AttrCurrent].AsInt64(), "the held token is not known")
			}
		})
	}
}
