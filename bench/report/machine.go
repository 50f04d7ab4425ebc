package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis/internal/testing/backend"
)

// machine writes what the figures were measured on: the CPU, the memory,
// the kernel, Go, the servers' versions and durability settings, and the
// load average.
func machine(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("machine", flag.ContinueOnError)
	md := fs.String("md", "", "write the Markdown fragment to this file")
	pass := fs.String("pass", "quiet", "the pass's name (quiet or loaded), printed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := backend.FromEnv()
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s UTC on %s, %d cores, %s RAM, Linux %s, %s; %s pass, load average %s at the start.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), cpuModel(), runtime.NumCPU(), memTotal(), kernel(), runtime.Version(), *pass, loadavg())
	fmt.Fprintf(&b, "Servers on loopback, started by scripts/services: %s; %s; etcd %s (3 members); ZooKeeper %s (3 members).\n",
		postgres(ctx, s.PostgresURL), redisVersion(ctx, s.RedisAddrs[0]), debVersion("etcd-server"), debVersion("zookeeper"))
	fmt.Print(b.String())
	if *md != "" {
		return os.WriteFile(*md, []byte(b.String()), 0o644)
	}
	return nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "an unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "an unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		return "(version unknown)"
	}
	return string(out)
}

// postgres names the server's version and durability; the URL, which may
// hold a password, is never printed.
func postgres(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return "PostgreSQL (unreachable)"
	}
	defer c.Close(ctx)
	var version, fsync, syncCommit string
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").Scan(&version, &fsync, &syncCommit); err != nil {
		return "PostgreSQL (version unknown)"
	}
	return fmt.Sprintf("PostgreSQL %s (fsync=%s, synchronous_commit=%s)", version, fsync, syncCommit)
}

func redisVersion(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server", "persistence").Result()
	if err != nil {
		return "Redis (unreachable)"
	}
	get := func(k string) string {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k+":"); ok {
				return v
			}
		}
		return "?"
	}
	return fmt.Sprintf("Redis %s (appendonly=%s)", get("redis_version"), map[string]string{"0": "no", "1": "yes"}[get("aof_enabled")])
}
