// Package backend opens an aegis.Locker by name, from server addresses, for
// the command line (aegis bench, aegis node) and the lab.
package backend

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/servers"
)

// Servers are the addresses of the servers backends connect to. They come
// from the AEGIS_* variables or the flags of the same names.
type Servers struct {
	PostgresURL   string   // AEGIS_POSTGRES_URL
	RedisAddrs    []string // AEGIS_REDIS_ADDRS; the first is the single-node one
	EtcdEndpoints []string // AEGIS_ETCD_ENDPOINTS
	ZKServers     []string // AEGIS_ZK_SERVERS
	NATSURLs      []string // AEGIS_NATS_URLS
	SQLitePath    string   // AEGIS_SQLITE_PATH

	// ZKSessionTimeout is the ZooKeeper session timeout asked for. A
	// zklease lease's TTL may not exceed the session the ensemble grants,
	// and a client paused longer than the session loses it (its lease
	// goes to another client). Default (0) one minute, so that aegis bench
	// can take one-minute leases; the ensemble clamps it to its
	// [minSessionTimeout, maxSessionTimeout] (400 ms to 60 s on the
	// servers of internal/testing/servers). The lab asks for its --ttl.
	ZKSessionTimeout time.Duration

	// LeaseHistory is Config.History of the postgres and sqlite backends:
	// how many grants of each key their grant history keeps (the lab's
	// nodes keep one, to draw each grant at the time the store made it).
	// Default 0: no history. At most 1000; more is an error wrapping
	// aegis.ErrInvalid from Open.
	LeaseHistory int
	// LeaseHolder is Config.Holder of the postgres and sqlite backends:
	// the name each grant records. Default "host/pid".
	LeaseHolder string
}

// FromEnv returns the servers named by the AEGIS_* variables, with the
// shared test servers of scripts/services for the unset ones.
func FromEnv() Servers {
	env := map[string]string{}
	for _, kv := range servers.SharedEnv() {
		env[kv[0]] = cmp.Or(os.Getenv(kv[0]), kv[1])
	}
	return Servers{
		PostgresURL:   env[servers.EnvPostgresURL],
		RedisAddrs:    strings.Split(env[servers.EnvRedisAddrs], ","),
		EtcdEndpoints: strings.Split(env[servers.EnvEtcdEndpoints], ","),
		ZKServers:     strings.Split(env[servers.EnvZKServers], ","),
		NATSURLs:      strings.Split(env[servers.EnvNATSURLs], ","),
		SQLitePath:    cmp.Or(os.Getenv("AEGIS_SQLITE_PATH"), "aegis.db"),
	}
}

// Opener connects to a backend's servers and returns a Locker and the
// function that closes its clients.
type Opener func(ctx context.Context, s Servers) (aegis.Locker, func(), error)

// openers is every backend, by the name the command line uses.
var openers = map[string]Opener{
	"etcd":         openEtcd,
	"etcd-session": openEtcdSession,
	"memory":       openMemory,
	"nats":         openNATS,
	"postgres":     openPostgres,
	"redis":        openRedis,
	"redlock":      openRedlock,
	"sqlite":       openSQLite,
	"zookeeper":    openZooKeeper,
}

// Names lists the backends, sorted.
func Names() []string { return slices.Sorted(maps.Keys(openers)) }

// Open connects the named backend.
func Open(ctx context.Context, name string, s Servers) (aegis.Locker, func(), error) {
	open, ok := openers[name]
	if !ok {
		return nil, nil, fmt.Errorf("%w: unknown backend %q (known: %s)", aegis.ErrInvalid, name, strings.Join(Names(), ", "))
	}
	return open(ctx, s)
}
