package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/redlock"
)

// docs/redis.md's Redlock (holdOnRedlock's body) on the five test nodes.
func Example_usage() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrs := docsnippets.List(servers.EnvRedisAddrs) // the single node, then the five Redlock nodes
	fmt.Println(holdOnRedlock(ctx, addrs[1:6]))
	// Output:
	// quorum: 3
	// exporting under a lease, token from the store: true
	// <nil>
}

// holdOnRedlock is docs/redis.md's Redlock usage, as printed there.
func holdOnRedlock(ctx context.Context, addrs []string) error {
	var nodes []redis.UniversalClient // independent primaries, not replicas of one another
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		nodes = append(nodes, c)
	}
	locker, err := redlock.New(nodes, nil) // Config{Prefix, NodeTimeout}
	if err != nil {
		return err
	}
	defer locker.Close()
	fmt.Println("quorum:", locker.Quorum()) // a majority: 3 of 5

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		return err
	}
	defer h.Release(ctx)
	return export(h.Context(), h.Token()) // an optimisation: the token, checked by fence, is the guarantee
}

// export stands for the work under the lease.
func export(ctx context.Context, token aegis.Token) error {
	fmt.Println("exporting under a lease, token from the store:", token > 0)
	return ctx.Err()
}
