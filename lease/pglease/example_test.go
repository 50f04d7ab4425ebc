package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/lease/pglease"
)

// A lease on PostgreSQL, from an empty database: New creates the table.
// Each grant's token is greater than the last, and a holder whose lease
// ended can neither renew nor release its successor's.
func Example() {
	ctx := context.Background()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	locker, err := pglease.New(pool, nil) // creates aegis_lease if missing
	if err != nil {
		fmt.Println(err)
		return
	}
	first, err := locker.TryAcquire(ctx, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first token:", first.Token)
	_, err = locker.TryAcquire(ctx, "invoice-export/2026-10", 30*time.Second)
	fmt.Println("while held:", errors.Is(err, aegis.ErrHeld))
	fmt.Println("release:", locker.Release(ctx, first))

	second, err := locker.TryAcquire(ctx, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second token:", second.Token)
	// The first holder, back from a pause, changes nothing:
	fmt.Println("stale renew lost:", errors.Is(locker.Renew(ctx, first, 30*time.Second), aegis.ErrLost))
	fmt.Println("stale release lost:", errors.Is(locker.Release(ctx, first), aegis.ErrLost))
	fmt.Println("release:", locker.Release(ctx, second))
	// Output:
	// first token: 1
	// while held: true
	// release: <nil>
	// second token: 2
	// stale renew lost: true
	// stale release lost: true
	// release: <nil>
}
