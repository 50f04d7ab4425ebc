package redislease_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/redislease"
)

// A lease on one Redis, its token, and a second owner that waits for it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, _, _ := strings.Cut(cmp.Or(os.Getenv("AEGIS_REDIS_ADDRS"), "127.0.0.1:16379"), ",")
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	locker, err := redislease.New(client, &redislease.Config{Prefix: fmt.Sprintf("example-%d:", time.Now().UnixNano())})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close() // the wake-up connection

	first, err := locker.TryAcquire(ctx, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first token:", first.Token)
	_, err = locker.TryAcquire(ctx, "invoice-export/2026-10", 30*time.Second)
	fmt.Println("second attempt held:", errors.Is(err, aegis.ErrHeld))

	// Acquire waits; the release wakes it through pub/sub, not a poll.
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = locker.Release(ctx, first)
	}()
	second, err := aegis.Acquire(ctx, locker, "invoice-export/2026-10", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second token:", second.Token)
	fmt.Println("release:", locker.Release(ctx, second))
	// Output:
	// first token: 1
	// second attempt held: true
	// second token: 2
	// release: <nil>
}
