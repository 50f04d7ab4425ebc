package fence_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/pglease"
)

// The README's example: hold a lease, and write through the fence with its
// token. A holder whose token was superseded gets aegis.ErrStale.
func Example() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	locker, err := pglease.New(pool, nil) // creates the lease table if missing
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fence.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	resource := fmt.Sprintf("example/%d", time.Now().UnixNano())

	write := func(token aegis.Token) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.Check(ctx, tx, resource, token); err != nil {
				return err // a newer holder exists: roll back
			}
			// The business write goes here, in the same transaction.
			return nil
		})
	}

	h, err := aegis.Hold(ctx, locker, resource, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(ctx)
	fmt.Println("first write:", write(h.Token()))
	// A holder that was paused past its lease comes back with a lower token:
	err = write(h.Token() - 1)
	fmt.Println("stale write rejected:", errors.Is(err, aegis.ErrStale))
	// Output:
	// first write: <nil>
	// stale write rejected: true
}
