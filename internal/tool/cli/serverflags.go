package cli

import (
	"cmp"
	"strings"

	"github.com/aegislab/aegis/internal/tool/backend"
)

// serverFlags adds the server address flags, named after the AEGIS_*
// variables they default to, and returns a function that reads them after
// parsing.
func serverFlags(fs *flagSet) func() backend.Servers {
	env := backend.FromEnv()
	// No default shown: the URL may carry a password, and help text is
	// copied into issues and logs.
	pg := fs.String("postgres-url", "", "PostgreSQL `URL` (default $AEGIS_POSTGRES_URL, else the shared test server)")
	redis := fs.String("redis-addrs", strings.Join(env.RedisAddrs, ","), "Redis `addresses`, comma-separated; the first is the single-node one (AEGIS_REDIS_ADDRS)")
	etcd := fs.String("etcd-endpoints", strings.Join(env.EtcdEndpoints, ","), "etcd `endpoints`, comma-separated (AEGIS_ETCD_ENDPOINTS)")
	zk := fs.String("zk-servers", strings.Join(env.ZKServers, ","), "ZooKeeper `servers`, comma-separated (AEGIS_ZK_SERVERS)")
	sqlite := fs.String("sqlite-path", env.SQLitePath, "SQLite database `file` (AEGIS_SQLITE_PATH)")
	return func() backend.Servers {
		return backend.Servers{
			PostgresURL:   cmp.Or(*pg, env.PostgresURL),
			RedisAddrs:    strings.Split(*redis, ","),
			EtcdEndpoints: strings.Split(*etcd, ","),
			ZKServers:     strings.Split(*zk, ","),
			SQLitePath:    *sqlite,
		}
	}
}
