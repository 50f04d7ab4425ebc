package sqlitelease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// A lease on SQLite, for the processes of one host: every process opens the
// same file. New creates the table in a new database.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlitelease-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	db, err := sqlitelease.Open(filepath.Join(dir, "leases.db")) // WAL, busy timeout, synchronous=FULL
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	locker, err := sqlitelease.New(db, nil) // creates aegis_lease if missing
	if err != nil {
		fmt.Println(err)
		return
	}

	h, err := aegis.Hold(ctx, locker, "nightly-reconciliation", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holding with token", h.Token())
	_, err = locker.TryAcquire(ctx, "nightly-reconciliation", 10*time.Second)
	fmt.Println("another process:", errors.Is(err, aegis.ErrHeld))
	fmt.Println("release:", h.Release(ctx))

	next, err := locker.TryAcquire(ctx, "nightly-reconciliation", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next token:", next.Token)
	fmt.Println("release:", locker.Release(ctx, next))
	// Output:
	// holding with token 1
	// another process: true
	// release: <nil>
	// next token: 2
	// release: <nil>
}
