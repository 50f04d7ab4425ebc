package backend

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/etcdlease"
)

func openEtcd(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	return openEtcdMode(ctx, s, nil)
}

// openEtcdSession is etcdlease in session mode: a Locker's grants share
// one etcd lease it keeps alive, each grant's TTL its timer.
func openEtcdSession(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	return openEtcdMode(ctx, s, &etcdlease.Config{Session: true})
}

func openEtcdMode(ctx context.Context, s Servers, cfg *etcdlease.Config) (aegis.Locker, func(), error) {
	eps := nonEmpty(s.EtcdEndpoints)
	if len(eps) == 0 {
		return nil, nil, fmt.Errorf("etcd: %w: no endpoint (AEGIS_ETCD_ENDPOINTS or --etcd-endpoints)", aegis.ErrInvalid)
	}
	if err := reachable(ctx, "etcd", eps, 1); err != nil {
		return nil, nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd: %w", err)
	}
	l, err := etcdlease.New(client, cfg)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); client.Close() }, nil
}
