package natslease_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/natslease"
)

// A lease on a NATS JetStream cluster: its token is the revision of the
// grant in the bucket's stream. docs/nats.md shows run's body.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(run(ctx, strings.Join(docsnippets.List(servers.EnvNATSURLs), ",")))
	// Output:
	// exporting under a lease, token from the store: true
	// <nil>
}

// run is docs/nats.md's usage, as printed there.
func run(ctx context.Context, urls string) error {
	nc, err := nats.Connect(urls) // "nats://a:4222,nats://b:4222,nats://c:4222"
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// nil: the bucket "aegis_leases", created if missing, on 3 replicas
	locker, err := natslease.New(js, nil)
	if err != nil {
		return err
	}

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 15*time.Second) // whole seconds
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
