package backend

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/zklease"
)

// zkSessionTimeout is the session timeout asked for when
// Servers.ZKSessionTimeout is zero: a lease's TTL may not exceed it, and
// aegis bench takes one-minute leases. Servers grant at most their
// maxSessionTimeout (60 s on the servers of internal/testing/servers).
const zkSessionTimeout = time.Minute

func openZooKeeper(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	timeout := cmp.Or(s.ZKSessionTimeout, zkSessionTimeout)
	if timeout < 0 {
		return nil, nil, fmt.Errorf("zookeeper: %w: session timeout %s is negative", aegis.ErrInvalid, timeout)
	}
	zs := nonEmpty(s.ZKServers)
	if len(zs) == 0 {
		return nil, nil, fmt.Errorf("zookeeper: %w: no server (AEGIS_ZK_SERVERS or --zk-servers)", aegis.ErrInvalid)
	}
	if err := reachable(ctx, "zookeeper", zs, 1); err != nil {
		return nil, nil, err
	}
	conn, cfg, err := zklease.Connect(zs, timeout, zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, nil, fmt.Errorf("zookeeper: %w", err)
	}
	l, err := zklease.New(conn, cfg)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return l, func() {
		_ = l.Close()
		conn.Close()
	}, nil
}

// quietZK drops zk's log lines (connected, authenticated, reconnecting…).
type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
