package cli

import (
	"cmp"
	"net/url"
	"strings"

	"github.com/aegislab/aegis/internal/testing/backend"
)

// serverFlags adds the server address flags, named after the AEGIS_*
// variables they default to, and returns a function that reads them after
// parsing.
func serverFlags(fs *flagSet) func() backend.Servers {
	env := backend.FromEnv()
	// No default shown: the URL may carry a password, and help text is
	// copied into issues and logs.
	pg := fs.String("postgres-url", "", "PostgreSQL `URL` (default $AEGIS_POSTGRES_URL, else the shared test server)")
	redis := addrsVar(fs, "redis-addrs", strings.Join(env.RedisAddrs, ","), "Redis `addresses`, comma-separated; the first is the single-node one (AEGIS_REDIS_ADDRS)")
	etcd := addrsVar(fs, "etcd-endpoints", strings.Join(env.EtcdEndpoints, ","), "etcd `endpoints`, comma-separated (AEGIS_ETCD_ENDPOINTS)")
	zk := addrsVar(fs, "zk-servers", strings.Join(env.ZKServers, ","), "ZooKeeper `servers`, comma-separated (AEGIS_ZK_SERVERS)")
	natsURLs := addrsVar(fs, "nats-urls", strings.Join(env.NATSURLs, ","), "NATS server `URLs`, comma-separated (AEGIS_NATS_URLS)")
	sqlite := fs.String("sqlite-path", env.SQLitePath, "SQLite database `file` (AEGIS_SQLITE_PATH)")
	return func() backend.Servers {
		return backend.Servers{
			PostgresURL:   cmp.Or(*pg, env.PostgresURL),
			RedisAddrs:    strings.Split(*redis, ","),
			EtcdEndpoints: strings.Split(*etcd, ","),
			ZKServers:     strings.Split(*zk, ","),
			NATSURLs:      strings.Split(*natsURLs, ","),
			SQLitePath:    *sqlite,
		}
	}
}

// addrs is a flag of server addresses whose default comes from the
// environment: it holds the addresses as given, and shows them (as its
// default in the help, too) with every password masked (see masked).
type addrs string

func (a *addrs) String() string     { return masked(string(*a)) }
func (a *addrs) Set(s string) error { *a = addrs(s); return nil }

// addrsVar defines an addrs flag and returns a pointer to its value.
func addrsVar(fs *flagSet, name, value, usage string) *string {
	a := addrs(value)
	fs.Var(&a, name, usage)
	return (*string)(&a)
}

// masked is s, comma-separated server addresses, with each one's password
// replaced by xxxxx and its host kept, so that the reader still sees which
// servers: the user information of a URL or of a bare user:password@host
// (its password, or the whole of it when it has no user: a token), and a
// URL's password parameter. Help text is pasted into issues and logs.
func masked(s string) string {
	if !strings.ContainsAny(s, "@=") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = maskAddr(p)
	}
	return strings.Join(parts, ",")
}

func maskAddr(a string) string {
	if at := strings.LastIndexByte(a, '@'); at >= 0 {
		start := 0
		if i := strings.Index(a, "://"); i >= 0 && i < at {
			start = i + len("://")
		}
		user, _, hasPassword := strings.Cut(a[start:at], ":")
		if hasPassword {
			user += ":"
		} else {
			user = ""
		}
		a = a[:start] + user + "xxxxx" + a[at:]
	}
	if base, query, ok := strings.Cut(a, "?"); ok {
		if q, err := url.ParseQuery(query); err == nil && q.Has("password") {
			q.Set("password", "xxxxx")
			a = base + "?" + q.Encode()
		} else if err != nil {
			a = base + "?…" // a query it cannot read may hold one
		}
	}
	return a
}
