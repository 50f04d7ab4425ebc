package redislease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/redislease"
)

// docs/redis.md's usage (holdOnRedis's body) on the test Redis.
func Example_usage() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(holdOnRedis(ctx, docsnippets.List(servers.EnvRedisAddrs)[0]))
	// Output:
	// exporting under a lease, token from the store: true
	// <nil>
}

// holdOnRedis is docs/redis.md's usage, as printed there.
func holdOnRedis(ctx context.Context, addr string) error {
	client := redis.NewClient(&redis.Options{Addr: addr}) // "127.0.0.1:6379"
	defer client.Close()
	locker, err := redislease.New(client, nil) // Config{Prefix: "aegis:", WaitReplicas: 0}
	if err != nil {
		return err
	}
	defer locker.Close() // its wake-up goroutine; the client stays yours

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		return err
	}
	defer h.Release(ctx)
	return export(h.Context(), h.Token()) // every write carries the token, checked by fence
}

// export stands for the work under the lease.
func export(ctx context.Context, token aegis.Token) error {
	fmt.Println("exporting under a lease, token from the store:", token > 0)
	return ctx.Err()
}
