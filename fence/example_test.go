package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/lease/pglease"
)

// The README's example, on an empty database: hold a lease, and write
// through the fence with its token. A holder whose token was superseded
// gets aegis.ErrStale.
func Example() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	fmt.Println("export:", readme(ctx, pool))
	fmt.Println("again:", readme(ctx, pool)) // the next grant: token 2
	var token int64
	if err := pool.QueryRow(ctx, "SELECT token FROM aegis_fence WHERE resource = 'invoice-export/2026-10'").Scan(&token); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("fence at token", token)

	// A holder that was paused past its lease comes back with token 1:
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.Check(ctx, tx, "invoice-export/2026-10", 1)
	})
	fmt.Println("stale write rejected:", errors.Is(err, aegis.ErrStale))
	// Output:
	// export: <nil>
	// again: <nil>
	// fence at token 2
	// stale write rejected: true
}

// readme is the first example of the README's "Quick start", as it is printed there.
func readme(ctx context.Context, pool *pgxpool.Pool) error {
	locker, err := pglease.New(pool, nil) // creates the lease table if missing
	if err != nil {
		return err
	}
	if err := fence.Migrate(ctx, pool); err != nil { // creates the fence table if missing
		return err
	}
	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		return err
	}
	defer h.Release(ctx)

	return pgx.BeginFunc(h.Context(), pool, func(tx pgx.Tx) error {
		if err := fence.CheckLease(h.Context(), tx, "invoice-export/2026-10", h.Lease()); err != nil {
			return err // aegis.ErrStale: a newer holder (or another with this token) wrote already; roll back
		}
		return exportInvoices(h.Context(), tx, "2026-10") // your writes, in the same transaction
	})
}

// exportInvoices stands for the business write: here one row of a table of
// its own, so that the example needs nothing but an empty database.
func exportInvoices(ctx context.Context, tx pgx.Tx, period string) error {
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoice_export (period text PRIMARY KEY, exported_at timestamptz NOT NULL)`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO invoice_export VALUES ($1, now()) ON CONFLICT (period) DO UPDATE SET exported_at = now()`, period)
	return err
}

// The fence's checks refuse a token no grant issued before any SQL is
// sent: here the token of a context outside a scheduled run.
func ExampleCheck_invalid() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if err := fence.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	var token aegis.Token // what `token, _ := schedule.TokenFrom(ctx)` gives outside a run
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.Check(ctx, tx, "invoice-export/2026-10", token)
	})
	fmt.Println(errors.Is(err, aegis.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// aegis: invalid argument: fence: token 0 is not positive: no lease grants it (a token read from a context outside a run?)
}

// A lease's writes go through CheckLease, which records a hash of the
// lease's owner beside its token: the holder writes as often as it likes,
// and a second holder granted the same token (a Redis failover that sent
// the counter back) is refused instead of committing beside it.
func ExampleCheckLease() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	locker, err := pglease.New(pool, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fence.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(ctx)

	fmt.Println("export:", exportHeld(pool, h))
	fmt.Println("again:", exportHeld(pool, h)) // the same holder, the same token

	// Another process granted the same key and token by a store that lost
	// its last grant: the same Token, another Owner.
	twin := h.Lease()
	twin.Owner = "the owner of a second grant of token 1"
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.CheckLease(ctx, tx, "invoice-export/2026-10", twin)
	})
	fmt.Println("twin rejected:", errors.Is(err, aegis.ErrStale))
	fmt.Println(err)
	// Output:
	// export: <nil>
	// again: <nil>
	// twin rejected: true
	// aegis: stale fencing token: resource "invoice-export/2026-10" already accepted token 1 from another owner
}

// exportHeld is docs/fence.md's snippet, as printed there: the business
// write of a held lease, fenced with the lease itself.
func exportHeld(pool *pgxpool.Pool, h *aegis.Held) error {
	return pgx.BeginFunc(h.Context(), pool, func(tx pgx.Tx) error {
		if err := fence.CheckLease(h.Context(), tx, "invoice-export/2026-10", h.Lease()); err != nil {
			return err // aegis.ErrStale: a newer holder, or another holder of this token, wrote already; roll back
		}
		return exportInvoices(h.Context(), tx, "2026-10") // your writes, in the same transaction
	})
}

// A holder paused past its lease comes back and is refused: the fence
// records the refusal itself, on a connection of its own (the refused
// transaction rolls back), and the operator reads it from the refusal log.
func ExampleRefusalLog() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if err := fence.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	res := "ledger/2026-10"
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, res, 41) }); err != nil {
		fmt.Println(err)
		return
	}
	token := aegis.Token(40) // a holder paused past its lease comes back
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, res, token) })
	if se, ok := errors.AsType[*fence.StaleError](err); ok && !se.Recorded {
		log.Printf("refused, not recorded: %v", se.RecordErr) // the refusal stands
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	refusals, err := fence.RefusalLog(ctx, db, &fence.RefusalFilter{Resource: res}, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := refusals[0]
	fmt.Println(r.Resource, r.Token, r.Held)
	// Output:
	// ledger/2026-10 40 41
}

// A fence on a table of its own: the service's resources are fenced apart
// from another service's on the same database and schema, and from the
// default tables of the package's functions.
func ExampleNew() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	lease := aegis.Lease{Key: "invoice-export", Owner: "replica-1", Token: 3}
	fmt.Println("checked:", ownTable(ctx, pool, "invoice-export/2026-10", lease))
	f, _ := fence.New(&fence.Config{Table: "billing_fence"})
	landed, err := f.Landed(ctx, pool, "invoice-export/2026-10", lease)
	fmt.Println("in billing_fence:", landed, err)
	if err := fence.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	landed, err = fence.Landed(ctx, pool, "invoice-export/2026-10", lease)
	fmt.Println("in aegis_fence:", landed, err)
	// Output:
	// checked: <nil>
	// in billing_fence: true <nil>
	// in aegis_fence: false <nil>
}

// ownTable is docs/fence.md's "A table of its own", as printed there.
func ownTable(ctx context.Context, pool *pgxpool.Pool, res string, lease aegis.Lease) error {
	f, err := fence.New(&fence.Config{Table: "billing_fence"}) // optionally schema-qualified: "billing.fence"
	if err != nil {
		return err // a bad name wraps aegis.ErrInvalid
	}
	if err := f.Migrate(ctx, pool); err != nil { // billing_fence, billing_fence_refusal, billing_fence_refusal_log
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.CheckLease(ctx, tx, res, lease) })
}
