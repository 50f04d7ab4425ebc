package aegis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/memlease"
)

func ExampleHold() {
	ctx := context.Background()
	locker := memlease.New() // pglease, sqlitelease, redislease, ... in production

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer h.Release(ctx)

	// Work under h.Context(): it is cancelled if the lease is lost. Every
	// write to the store of record carries h.Token() through the fence.
	fmt.Println("holding with token", h.Token())

	_, err = locker.TryAcquire(ctx, "invoice-export/2026-10", time.Second)
	fmt.Println("second owner:", err)
	// Output:
	// holding with token 1
	// second owner: aegis: lease held by another owner
}
