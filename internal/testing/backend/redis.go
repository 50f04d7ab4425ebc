package backend

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/redislease"
	"github.com/aegislab/aegis/lease/redlock"
)

// openRedis is redislease on the first of Servers.RedisAddrs, the
// single-node one.
func openRedis(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	addrs := nonEmpty(s.RedisAddrs)
	if len(addrs) == 0 {
		return nil, nil, fmt.Errorf("redis: %w: no address (AEGIS_REDIS_ADDRS or --redis-addrs)", aegis.ErrInvalid)
	}
	if err := reachable(ctx, "redis", addrs[:1], 1); err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addrs[0]})
	l, err := redislease.New(c, nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); c.Close() }, nil
}

// RedlockAddrs returns the Redlock nodes among the Redis addresses: with
// six or more, all but the first (the first is the single-node one, as in
// the shared test set: 16379 for redis, 16380-16384 for redlock); with
// five or fewer, all of them.
func RedlockAddrs(addrs []string) []string {
	addrs = nonEmpty(addrs)
	if len(addrs) >= 6 {
		return addrs[1:]
	}
	return addrs
}

// openRedlock is redlock on RedlockAddrs(Servers.RedisAddrs).
func openRedlock(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	addrs := RedlockAddrs(s.RedisAddrs)
	if len(addrs) == 0 {
		return nil, nil, fmt.Errorf("redlock: %w: no address (AEGIS_REDIS_ADDRS or --redis-addrs)", aegis.ErrInvalid)
	}
	// A majority is what a grant needs; a minority down is what Redlock
	// is for.
	if err := reachable(ctx, "redlock", addrs, len(addrs)/2+1); err != nil {
		return nil, nil, err
	}
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a})
	}
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	l, err := redlock.New(cs, nil)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return l, func() { l.Close(); closeAll() }, nil
}

// nonEmpty returns the addresses without surrounding spaces, dropping
// empty ones ("a,,b", a trailing comma).
func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
