package redlock_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis/lease/redlock"
)

// Redlock over five independent Redis servers: a majority of three grants
// the lease, and its token is the greatest of their counters.
func Example() {
	ctx := context.Background()
	addrs := strings.Split(cmp.Or(os.Getenv("AEGIS_REDIS_ADDRS"),
		"127.0.0.1:16379,127.0.0.1:16380,127.0.0.1:16381,127.0.0.1:16382,127.0.0.1:16383,127.0.0.1:16384"), ",")
	var nodes []redis.UniversalClient
	for _, a := range addrs[1:6] {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		nodes = append(nodes, c)
	}
	locker, err := redlock.New(nodes, &redlock.Config{Prefix: fmt.Sprintf("example-%d:", time.Now().UnixNano())})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	lease, err := locker.TryAcquire(ctx, "nightly-report", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("quorum:", locker.Quorum())
	fmt.Println("token:", lease.Token)
	fmt.Println("valid for at most 10s:", time.Until(lease.Deadline) <= 10*time.Second)
	fmt.Println("release:", locker.Release(ctx, lease))
	// Output:
	// quorum: 3
	// token: 1
	// valid for at most 10s: true
	// release: <nil>
}
