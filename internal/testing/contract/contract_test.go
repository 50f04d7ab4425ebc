package contract_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Only docs/design.md section 3: Token, Lease, Locker, the errors, Acquire, Hold.
func exercise(t *testing.T, l aegis.Locker) {
	ctx := context.Background()
	var _ aegis.Token = 0
	lease, err := l.TryAcquire(ctx, "contract/"+t.Name(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got aegis.Lease = *lease
	if got.Key == "" || got.Token <= 0 || got.Owner == "" || got.TTL != time.Second || got.Deadline.IsZero() {
		t.Fatalf("lease fields: %+v", got)
	}
	if _, err := l.TryAcquire(ctx, "contract/"+t.Name(), time.Second); !errors.Is(err, aegis.ErrHeld) {
		t.Fatalf("second acquire: %v", err)
	}
	if err := l.Renew(ctx, lease, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, lease); !errors.Is(err, aegis.ErrLost) {
		t.Fatalf("second release: %v", err)
	}
	next, err := aegis.Acquire(ctx, l, "contract/"+t.Name(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= lease.Token {
		t.Fatalf("token %d after %d", next.Token, lease.Token)
	}
	if err := l.Release(ctx, next); err != nil {
		t.Fatal(err)
	}
	h, err := aegis.Hold(ctx, l, "contract/"+t.Name(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h.Context().Err() != nil {
		t.Fatal("held context is done")
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBackends(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pg, err := pglease.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "contract.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lite, err := sqlitelease.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	var _ *pglease.Locker = pg
	var _ *sqlitelease.Locker = lite
	var _ *memlease.Locker = memlease.New()
	for name, l := range map[string]aegis.Locker{"pglease": pg, "sqlitelease": lite, "memlease": memlease.New()} {
		t.Run(name, func(t *testing.T) { exercise(t, l) })
	}
}

// Only docs/design.md section 5: Migrate, MigrateSQL, Check, CheckSQL.
func TestFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if err := fence.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	check := func(token aegis.Token) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, "r", token) })
	}
	if err := check(2); err != nil {
		t.Fatal(err)
	}
	if err := check(1); !errors.Is(err, aegis.ErrStale) {
		t.Fatalf("lower token: %v", err)
	}

	db := testenv.PostgresSQL(t)
	if err := fence.MigrateSQL(ctx, db); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.CheckSQL(ctx, tx, "r", 3); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
