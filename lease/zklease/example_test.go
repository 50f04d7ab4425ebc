package zklease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/zklease"
)

// A lease on ZooKeeper: its token is the lock node's czxid, ordered across
// the ensemble. docs/consensus.md shows run's body.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(run(ctx, docsnippets.List(servers.EnvZKServers)))
	// Output:
	// exporting under a lease, token from the store: true
	// <nil>
}

// run is docs/consensus.md's ZooKeeper usage, as printed there.
func run(ctx context.Context, servers []string) error {
	conn, cfg, err := zklease.Connect(servers, 30*time.Second) // zk.Connect, and the Config that trusts it
	if err != nil {
		return err
	}
	defer conn.Close()
	locker, err := zklease.New(conn, cfg) // cfg: the granted session timeout, the session's events
	if err != nil {
		return err
	}
	defer locker.Close()

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 10*time.Second) // at most the session timeout
	if err != nil {
		return err
	}
	defer h.Release(ctx)
	return export(h.Context(), h.Token()) // every write goes through the fence with the token
}

// export stands for the work under the lease.
func export(ctx context.Context, token aegis.Token) error {
	fmt.Println("exporting under a lease, token from the store:", token > 0)
	return ctx.Err()
}
