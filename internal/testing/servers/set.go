package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// The environment variables that tell tests, the lab and the CLI where the
// servers are.
const (
	EnvPostgresURL   = "AEGIS_POSTGRES_URL"   // postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable
	EnvRedisAddrs    = "AEGIS_REDIS_ADDRS"    // host:port,...; the first is the single-node one
	EnvEtcdEndpoints = "AEGIS_ETCD_ENDPOINTS" // http://host:port,...
	EnvZKServers     = "AEGIS_ZK_SERVERS"     // host:port,...
	EnvScratch       = "AEGIS_SCRATCH"        // the shared servers' directory
)

// SetConfig configures [StartSet]. The zero value starts everything on free
// ports: PostgreSQL, six independent Redis primaries, a 3-member etcd
// cluster, a 3-member ZooKeeper ensemble and a 3-server NATS cluster with
// JetStream (nats-server as `scripts/services start` built it).
type SetConfig struct {
	// Kinds are the kinds to start. Default: all of them.
	Kinds []Kind
	// Postgres, Etcd, ZooKeeper and NATS configure those servers; their
	// Detach fields are ignored (see Detach below).
	Postgres  PostgresConfig
	Etcd      EtcdConfig
	ZooKeeper ZooKeeperConfig
	NATS      NATSConfig
	// Redis has one entry per Redis server. Default: six primaries on free
	// ports with DEBUG allowed from loopback.
	Redis []RedisConfig
	// Detach runs every server detached and makes the start idempotent
	// (see [RedisConfig.Detach]): the shared test servers.
	Detach bool
	// AllowMissing starts what is installed and records in
	// Set.Unavailable each kind whose program is missing, instead of
	// failing. Default: false.
	AllowMissing bool
}

// Set is the servers of a [StartSet] call. A field is nil (or empty) when
// its kind was not asked for or is unavailable.
type Set struct {
	Dir       string
	Postgres  *Postgres
	Redis     []*Redis
	Etcd      *Etcd
	ZooKeeper *ZooKeeper
	NATS      *NATS
	// Unavailable holds, with SetConfig.AllowMissing, the [MissingError]
	// of each kind that could not start because its program is missing.
	Unavailable map[Kind]error
}

// SharedDir returns the shared test servers' directory: $AEGIS_SCRATCH,
// or /tmp/aegis-services.
func SharedDir() string {
	if d := os.Getenv(EnvScratch); d != "" {
		return d
	}
	return "/tmp/aegis-services"
}

// The shared test servers' fixed ports.
const (
	sharedPostgresPort = 15432
	sharedRedisPort    = 16379 // and the next five
	sharedRedisCount   = 6
)

var (
	sharedEtcdClient  = []int{12379, 12381, 12383}
	sharedEtcdPeer    = []int{12380, 12382, 12384}
	sharedZKClient    = []int{12181, 12182, 12183}
	sharedZKQuorum    = []int{12881, 12882, 12883}
	sharedZKElection  = []int{12891, 12892, 12893}
	sharedNATSClient  = []int{14222, 14223, 14224}
	sharedNATSCluster = []int{14248, 14249, 14250}
	defaultRedisExtra = map[string]string{"enable-debug-command": "local"}
)

// SharedConfig returns the configuration of the shared test servers that
// scripts/services starts: detached, on fixed loopback ports (PostgreSQL
// 15432, with pg_stat_statements loaded; Redis 16379–16384; etcd clients 12379/12381/12383, peers
// 12380/12382/12384; ZooKeeper clients 12181–12183, quorum 12881–12883,
// election 12891–12893; NATS clients 14222–14224, routes 14248–14250).
func SharedConfig() *SetConfig {
	c := &SetConfig{
		// pg_stat_statements: the queue bench counts statements per job
		// (internal/testing/queuebench); loaded at the server's next fresh
		// start, a running server is adopted as it is.
		Postgres: PostgresConfig{Port: sharedPostgresPort, Settings: map[string]string{
			"shared_preload_libraries": "pg_stat_statements",
			"pg_stat_statements.max":   "10000",
		}},
		Etcd:      EtcdConfig{ClientPorts: sharedEtcdClient, PeerPorts: sharedEtcdPeer},
		ZooKeeper: ZooKeeperConfig{ClientPorts: sharedZKClient, QuorumPorts: sharedZKQuorum, ElectionPorts: sharedZKElection},
		NATS:      NATSConfig{ClientPorts: sharedNATSClient, ClusterPorts: sharedNATSCluster},
		Detach:    true,
	}
	for i := range sharedRedisCount {
		c.Redis = append(c.Redis, RedisConfig{Port: sharedRedisPort + i, Config: defaultRedisExtra})
	}
	return c
}

// SharedEnv returns the environment variables that point at the shared
// test servers, in the order of [Kinds]: what `aegis services env` prints
// and the defaults tests use when a variable is unset.
func SharedEnv() [][2]string {
	c := SharedConfig()
	var redis []string
	for _, r := range c.Redis {
		redis = append(redis, hostPort(r.Port))
	}
	var etcd, zk, nats []string
	for _, p := range c.Etcd.ClientPorts {
		etcd = append(etcd, "http://"+hostPort(p))
	}
	for _, p := range c.ZooKeeper.ClientPorts {
		zk = append(zk, hostPort(p))
	}
	for _, p := range c.NATS.ClientPorts {
		nats = append(nats, "nats://"+hostPort(p))
	}
	return [][2]string{
		{EnvPostgresURL, "postgres://aegis@" + hostPort(c.Postgres.Port) + "/aegis?sslmode=disable"},
		{EnvRedisAddrs, strings.Join(redis, ",")},
		{EnvEtcdEndpoints, strings.Join(etcd, ",")},
		{EnvZKServers, strings.Join(zk, ",")},
		{EnvNATSURLs, strings.Join(nats, ",")},
	}
}

// EnvKind returns the kind of server an AEGIS_* variable points at.
func EnvKind(name string) Kind {
	switch name {
	case EnvPostgresURL:
		return KindPostgres
	case EnvRedisAddrs:
		return KindRedis
	case EnvEtcdEndpoints:
		return KindEtcd
	case EnvZKServers:
		return KindZooKeeper
	case EnvNATSURLs:
		return KindNATS
	}
	return ""
}

// StartSet starts the servers cfg asks for in dir, each kind in its own
// subdirectory (postgres, redis-1…, etcd, zookeeper, nats), the kinds at
// once.
// cfg may be nil.
//
// When a server fails to start, StartSet stops every server it started
// and returns the error; with cfg.Detach it leaves the others running (a
// second call starts only what is missing). The caller stops the set with
// [Set.Stop], typically deferred; a program that handles Ctrl-C with
// signal.NotifyContext gets its deferred Stop run. Servers that are not
// detached get SIGKILL if the caller dies without stopping them.
func StartSet(ctx context.Context, dir string, cfg *SetConfig) (*Set, error) {
	c, kinds := setDefaults(cfg)
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Set{Dir: dir, Unavailable: map[Kind]error{}}

	t := &setStarts{set: s, allowMissing: c.AllowMissing}
	if slices.Contains(kinds, KindPostgres) {
		goStart(t, KindPostgres, &s.Postgres, func() (*Postgres, error) {
			return StartPostgres(ctx, filepath.Join(dir, "postgres"), &c.Postgres)
		})
	}
	if slices.Contains(kinds, KindRedis) {
		goStart(t, KindRedis, &s.Redis, func() ([]*Redis, error) {
			return startRedises(ctx, dir, &c)
		})
	}
	if slices.Contains(kinds, KindEtcd) {
		goStart(t, KindEtcd, &s.Etcd, func() (*Etcd, error) {
			return StartEtcd(ctx, filepath.Join(dir, "etcd"), &c.Etcd)
		})
	}
	if slices.Contains(kinds, KindZooKeeper) {
		goStart(t, KindZooKeeper, &s.ZooKeeper, func() (*ZooKeeper, error) {
			return StartZooKeeper(ctx, filepath.Join(dir, "zookeeper"), &c.ZooKeeper)
		})
	}
	if slices.Contains(kinds, KindNATS) {
		goStart(t, KindNATS, &s.NATS, func() (*NATS, error) {
			return StartNATS(ctx, filepath.Join(dir, "nats"), &c.NATS)
		})
	}
	t.wg.Wait()
	if len(t.errs) > 0 {
		if !c.Detach {
			_ = s.Stop()
		}
		return nil, errors.Join(t.errs...)
	}
	return s, nil
}

// setDefaults returns a copy of cfg with its defaults filled in, and the
// kinds to start.
func setDefaults(cfg *SetConfig) (SetConfig, []Kind) {
	c := SetConfig{}
	if cfg != nil {
		c = *cfg
	}
	kinds := c.Kinds
	if len(kinds) == 0 {
		kinds = Kinds
	}
	if c.Redis == nil {
		for range sharedRedisCount {
			c.Redis = append(c.Redis, RedisConfig{Config: defaultRedisExtra})
		}
	}
	c.Postgres.Detach, c.Etcd.Detach, c.ZooKeeper.Detach, c.NATS.Detach = c.Detach, c.Detach, c.Detach, c.Detach
	return c, kinds
}

// setStarts is the kinds of a [StartSet] starting at once: it waits for
// them and collects their errors, or, with AllowMissing, the kinds whose
// program is missing.
type setStarts struct {
	set          *Set
	allowMissing bool
	wg           sync.WaitGroup
	mu           sync.Mutex
	errs         []error
}

// record notes that kind failed to start with err.
func (t *setStarts) record(kind Kind, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.allowMissing && IsMissing(err) {
		t.set.Unavailable[kind] = err
		return
	}
	t.errs = append(t.errs, err)
}

// goStart runs start on a goroutine of t and stores what it started in
// into, or records its error.
func goStart[T any](t *setStarts, kind Kind, into *T, start func() (T, error)) {
	t.wg.Go(func() {
		v, err := start()
		if err != nil {
			t.record(kind, err)
			return
		}
		*into = v
	})
}

// startRedises starts c's Redis servers one after another, in
// dir/redis-1…; when one fails it stops those it started (unless
// detached) and returns the error.
func startRedises(ctx context.Context, dir string, c *SetConfig) ([]*Redis, error) {
	rs := make([]*Redis, len(c.Redis))
	for i, rc := range c.Redis {
		rc.Detach = c.Detach
		r, err := StartRedis(ctx, filepath.Join(dir, fmt.Sprintf("redis-%d", i+1)), &rc)
		if err != nil {
			for _, r := range rs[:i] {
				if !c.Detach {
					_ = r.Stop()
				}
			}
			return nil, err
		}
		rs[i] = r
	}
	return rs, nil
}

// Procs returns every process of the set: PostgreSQL, the Redis servers,
// the etcd members, the ZooKeeper members, the NATS servers.
func (s *Set) Procs() []*Proc {
	var out []*Proc
	if s.Postgres != nil {
		out = append(out, s.Postgres.Proc)
	}
	for _, r := range s.Redis {
		out = append(out, r.Proc)
	}
	if s.Etcd != nil {
		out = append(out, s.Etcd.Members()...)
	}
	if s.ZooKeeper != nil {
		out = append(out, s.ZooKeeper.Members()...)
	}
	if s.NATS != nil {
		out = append(out, s.NATS.Members()...)
	}
	return out
}

// Env returns NAME=value pairs for the AEGIS_* variables of the servers
// that run, for a child process's environment.
func (s *Set) Env() []string {
	var env []string
	if s.Postgres != nil {
		env = append(env, EnvPostgresURL+"="+s.Postgres.URL())
	}
	if len(s.Redis) > 0 {
		var a []string
		for _, r := range s.Redis {
			a = append(a, r.Addr())
		}
		env = append(env, EnvRedisAddrs+"="+strings.Join(a, ","))
	}
	if s.Etcd != nil {
		env = append(env, EnvEtcdEndpoints+"="+strings.Join(s.Etcd.Endpoints(), ","))
	}
	if s.ZooKeeper != nil {
		env = append(env, EnvZKServers+"="+strings.Join(s.ZooKeeper.Addrs(), ","))
	}
	if s.NATS != nil {
		env = append(env, EnvNATSURLs+"="+strings.Join(s.NATS.URLs(), ","))
	}
	return env
}

// Stop stops every server of the set, the kinds at once, and waits for
// them.
func (s *Set) Stop() error {
	var stops []func() error
	if s.Postgres != nil {
		stops = append(stops, s.Postgres.Stop)
	}
	for _, r := range s.Redis {
		stops = append(stops, r.Stop)
	}
	if s.Etcd != nil {
		stops = append(stops, s.Etcd.Stop)
	}
	if s.ZooKeeper != nil {
		stops = append(stops, s.ZooKeeper.Stop)
	}
	if s.NATS != nil {
		stops = append(stops, s.NATS.Stop)
	}
	errs := make([]error, len(stops))
	var wg sync.WaitGroup
	for i, stop := range stops {
		wg.Go(func() { errs[i] = stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
