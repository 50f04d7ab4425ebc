package servers_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// A destructive test starts a private Redis on a free port, crashes it and
// brings it back empty on the same port.
func ExampleStartRedis() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	r, err := servers.StartRedis(ctx, dir, nil)
	if err != nil {
		log.Fatal(err) // names the server, its address and its log's last lines
	}
	defer r.Stop()

	_, _ = servers.RedisCommand(ctx, r.Addr(), "SET", "k", "v")
	_ = r.Kill() // SIGKILL: a crash
	if err := r.Start(ctx); err != nil {
		log.Fatal(err)
	}
	v, _ := servers.RedisCommand(ctx, r.Addr(), "GET", "k")
	fmt.Printf("after the crash: %q\n", v)
	// Output: after the crash: ""
}
