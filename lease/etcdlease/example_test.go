package etcdlease_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/etcdlease"
)

// A lease on etcd: its token is the lock key's create revision, ordered
// across the cluster. docs/consensus.md shows run's body.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(run(ctx, docsnippets.List(servers.EnvEtcdEndpoints)))
	// Output:
	// exporting under a lease, token from the store: true
	// <nil>
}

// run is docs/consensus.md's etcd usage, as printed there.
func run(ctx context.Context, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
	if err != nil {
		return err
	}
	defer cli.Close()
	locker, err := etcdlease.New(cli, nil) // nil: Prefix "aegis/lease/", MaxTTL 24 h
	if err != nil {
		return err
	}

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 10*time.Second) // whole seconds
	if err != nil {
		return err
	}
	defer h.Release(ctx)
	return export(h.Context(), h.Token()) // every write goes through the fence with the token
}

// Session mode: one etcd lease for all of a process's grants, as
// concurrency.Mutex users lock. docs/consensus.md shows runSession's body.
func Example_session() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(runSession(ctx, docsnippets.List(servers.EnvEtcdEndpoints)))
	// Output:
	// exporting under a lease, token from the store: true
	// <nil>
}

// runSession is docs/consensus.md's etcd session-mode usage, as printed there.
func runSession(ctx context.Context, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
	if err != nil {
		return err
	}
	defer cli.Close()
	locker, err := etcdlease.New(cli, &etcdlease.Config{
		Session:    true,             // one etcd lease for every grant of this Locker
		SessionTTL: 30 * time.Second, // a dead process's keys go after this (default 60 s)
	})
	if err != nil {
		return err
	}
	defer locker.Close() // stops the keep-alive and revokes the session: its keys go at once

	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 10*time.Second) // any TTL up to SessionTTL
	if err != nil {
		return err
	}
	defer h.Release(ctx)
	return export(h.Context(), h.Token())
}

// export stands for the work under the lease.
func export(ctx context.Context, token aegis.Token) error {
	fmt.Println("exporting under a lease, token from the store:", token > 0)
	return ctx.Err()
}
