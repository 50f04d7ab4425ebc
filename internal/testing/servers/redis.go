package servers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// RedisConfig configures [StartRedis]. The zero value is usable.
type RedisConfig struct {
	// Port is the TCP port on 127.0.0.1. Default: a free port.
	Port int
	// ReplicaOf is the host:port of the primary this server replicates.
	// Default: none, a primary.
	ReplicaOf string
	// Config holds more redis.conf directives, written after the defaults
	// (so they win), as "name value" lines: {"enable-debug-command":
	// "local", "notify-keyspace-events": "KEA"}. A value that holds spaces
	// must be quoted as redis.conf wants it.
	Config map[string]string
	// Detach runs the server in its own session so that it outlives the
	// caller, and makes the start idempotent: a healthy server already
	// running from dir is adopted. Default: false (the server gets SIGKILL
	// when the caller's process dies).
	Detach bool
	// StartTimeout bounds the wait for the server to answer PING.
	// Default: 20 s.
	StartTimeout time.Duration
}

// Redis is a Redis server without persistence (no RDB snapshots, no AOF):
// a restart, graceful or not, starts empty, as a node restarted without
// fsync does.
type Redis struct {
	*Proc
}

// StartRedis starts a Redis server with its configuration and log in dir
// and returns once it answers PING (a replica answers before its first sync
// completes). cfg may be nil.
func StartRedis(ctx context.Context, dir string, cfg *RedisConfig) (*Redis, error) {
	c := RedisConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.StartTimeout = cmp.Or(c.StartTimeout, 20*time.Second)
	if c.ReplicaOf != "" {
		if _, _, err := net.SplitHostPort(c.ReplicaOf); err != nil {
			return nil, fmt.Errorf("servers: RedisConfig.ReplicaOf %q: want host:port", c.ReplicaOf)
		}
	}
	if _, err := redisBinary(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, picked, err := pickPorts("RedisConfig.Port", nonZero(c.Port), 1)
		if err != nil {
			return nil, err
		}
		r := newRedis(dir, ports[0], c)
		err = r.startOrAdopt(ctx)
		if err == nil {
			return r, nil
		}
		if !picked || attempt == 3 || !isPortConflict(err) {
			return nil, err
		}
	}
}

func newRedis(dir string, port int, c RedisConfig) *Redis {
	r := &Redis{Proc: &Proc{
		kind:       KindRedis,
		name:       nameFor(KindRedis, dir),
		dir:        dir,
		addr:       hostPort(port),
		ports:      []int{port},
		detach:     c.Detach,
		timeout:    c.StartTimeout,
		stopSignal: syscall.SIGTERM,
	}}
	r.command = func(context.Context) (*exec.Cmd, error) {
		bin, err := redisBinary()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(conf, []byte(redisConf(dir, port, c)), 0o644); err != nil {
			return nil, err
		}
		return exec.Command(bin, conf), nil
	}
	r.wipe = func() error { return nil }
	return r
}

func redisConf(dir string, port int, c RedisConfig) string {
	var b strings.Builder
	b.WriteString("# Written by aegis on every start; edits are lost.\n")
	fmt.Fprintf(&b, "bind 127.0.0.1\nport %d\ndaemonize no\ndir %q\nlogfile \"\"\n", port, dir)
	b.WriteString("save \"\"\nappendonly no\n")
	// Replicas sync at once (the default waits 5 s for more replicas).
	b.WriteString("repl-diskless-sync-delay 0\n")
	if c.ReplicaOf != "" {
		host, p, _ := net.SplitHostPort(c.ReplicaOf)
		fmt.Fprintf(&b, "replicaof %s %s\n", host, p)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Config)) {
		v := c.Config[k]
		if v == "" {
			v = `""`
		}
		fmt.Fprintf(&b, "%s %s\n", k, v)
	}
	return b.String()
}
