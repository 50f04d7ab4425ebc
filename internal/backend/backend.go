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

	"github.com/aegislab/aegis"
)

// Servers are the addresses of the servers backends connect to. They come
// from the AEGIS_* variables or the flags of the same names.
type Servers struct {
	PostgresURL   string   // AEGIS_POSTGRES_URL
	RedisAddrs    []string // AEGIS_REDIS_ADDRS; the first is the single-node one
	EtcdEndpoints []string // AEGIS_ETCD_ENDPOINTS
	ZKServers     []string // AEGIS_ZK_SERVERS
	SQLitePath    string   // AEGIS_SQLITE_PATH
}

// Defaults are the loopback addresses of scripts/services.
var Defaults = Servers{
	PostgresURL:   "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable",
	RedisAddrs:    []string{"127.0.0.1:16379", "127.0.0.1:16380", "127.0.0.1:16381", "127.0.0.1:16382", "127.0.0.1:16383", "127.0.0.1:16384"},
	EtcdEndpoints: []string{"http://127.0.0.1:12379", "http://127.0.0.1:12381", "http://127.0.0.1:12383"},
	ZKServers:     []string{"127.0.0.1:12181", "127.0.0.1:12182", "127.0.0.1:12183"},
	SQLitePath:    "aegis.db",
}

// FromEnv returns the servers named by the AEGIS_* variables, with Defaults
// for the unset ones.
func FromEnv() Servers {
	list := func(name string, def []string) []string {
		if v := os.Getenv(name); v != "" {
			return strings.Split(v, ",")
		}
		return def
	}
	return Servers{
		PostgresURL:   cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), Defaults.PostgresURL),
		RedisAddrs:    list("AEGIS_REDIS_ADDRS", Defaults.RedisAddrs),
		EtcdEndpoints: list("AEGIS_ETCD_ENDPOINTS", Defaults.EtcdEndpoints),
		ZKServers:     list("AEGIS_ZK_SERVERS", Defaults.ZKServers),
		SQLitePath:    cmp.Or(os.Getenv("AEGIS_SQLITE_PATH"), Defaults.SQLitePath),
	}
}

// Opener connects to a backend's servers and returns a Locker and the
// function that closes its clients.
type Opener func(ctx context.Context, s Servers) (aegis.Locker, func(), error)

// openers is every backend, by the name the command line uses.
var openers = map[string]Opener{
	"memory":   openMemory,
	"postgres": openPostgres,
	"sqlite":   openSQLite,
}

// Names lists the backends, sorted.
func Names() []string { return slices.Sorted(maps.Keys(openers)) }

// Open connects the named backend.
func Open(ctx context.Context, name string, s Servers) (aegis.Locker, func(), error) {
	open, ok := openers[name]
	if !ok {
		return nil, nil, fmt.Errorf("unknown backend %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return open(ctx, s)
}
