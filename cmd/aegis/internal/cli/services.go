package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aegislab/aegis/internal/testing/servers"
)

var servicesCommand = command{
	name:    "services",
	summary: "start, stop and check the shared test servers",
	run:     runServices,
}

const servicesUsage = `
usage: aegis services [flags] start|stop|status|env|missing [server...]

Services manages the shared test servers that the tests of every package
use: PostgreSQL on 127.0.0.1:15432, six Redis primaries on 16379-16384, a
3-member etcd cluster (clients 12379, 12381, 12383), a 3-member ZooKeeper
ensemble (clients 12181-12183) and three NATS servers clustered with
JetStream (clients 14222-14224, routes 14248-14250). They run detached,
with their data, logs and pid files in the scratch directory, until
stopped. A server is postgres, redis, etcd, zookeeper, nats or jaeger; none
means all but jaeger.

nats is nats-server built from the tool module tools/nats (run from the
repository's root) into the scratch directory's nats-bin: Debian's is
older than the per-key TTLs that lease/natslease needs. Its first build
takes half a minute to a minute on 2 cores with the module proxy; it is built
again only when that module's go.mod or go.sum changes.

jaeger is Jaeger all-in-one with memory storage, for the Jaeger tests
(make test-jaeger): OTLP over HTTP on 127.0.0.1:4318, its query API on
127.0.0.1:16686 (its UI there is a placeholder page: built from the Go
module, it has no UI assets). It starts only when named: its first start
builds it from the tool module tools/jaeger (run from the repository's
root), about 10 minutes on 2 cores, into the scratch directory's
jaeger-bin, and builds again only when that module's go.mod or go.sum
changes.

	start    start the servers that are not running and healthy, and wait
	         until all are ready (a no-op when they are)
	stop     stop them gracefully (with no server named, jaeger too)
	status   show each server; exit status 1 when one is not healthy
	         (with no server named, jaeger only when it was started)
	env      print shell export lines for AEGIS_POSTGRES_URL,
	         AEGIS_REDIS_ADDRS, AEGIS_ETCD_ENDPOINTS, AEGIS_ZK_SERVERS and
	         AEGIS_NATS_URLS, and while jaeger runs
	         AEGIS_JAEGER_OTLP_ENDPOINT and AEGIS_JAEGER_QUERY_URL
	missing  print the Debian packages of the servers whose programs are
	         missing, one a line

scripts/services wraps this command and installs missing packages first
(scripts/services install).
`

func runServices(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("services", stderr, servicesUsage)
	dir := fs.String("dir", "", "the scratch `directory` of the servers (default $AEGIS_SCRATCH, or /tmp/aegis-services)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long start may take")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("missing action: start, stop, status, env or missing")
	}
	action := fs.Arg(0)
	// Flags may also follow the action: aegis services start -dir D redis.
	if err := fs.parse(fs.Args()[1:]); err != nil {
		return err
	}
	if *dir == "" {
		*dir = servers.SharedDir()
	}
	kinds, err := parseKinds(fs.Args())
	if err != nil {
		return err
	}
	all := fs.NArg() == 0 // no server named: jaeger only when it was started
	switch action {
	case "start":
		return servicesStart(ctx, *dir, *timeout, kinds, stdout, stderr)
	case "stop":
		if all {
			kinds = append(kinds, servers.KindJaeger)
		}
		return servicesStop(ctx, *dir, kinds, stdout)
	case "status":
		if all && jaegerStarted(ctx, *dir, false) {
			kinds = append(kinds, servers.KindJaeger)
		}
		return servicesStatus(ctx, *dir, kinds, stdout)
	case "env":
		for _, kv := range servers.SharedEnv() {
			if slices.Contains(kinds, servers.EnvKind(kv[0])) {
				fmt.Fprintf(stdout, "export %s='%s'\n", kv[0], kv[1])
			}
		}
		if (all || slices.Contains(kinds, servers.KindJaeger)) && jaegerStarted(ctx, *dir, true) {
			for _, kv := range servers.SharedJaegerEnv() {
				fmt.Fprintf(stdout, "export %s='%s'\n", kv[0], kv[1])
			}
		}
		return nil
	case "missing":
		var pkgs []string
		for _, m := range servers.Missing(kinds...) {
			if !slices.Contains(pkgs, m.Package) {
				pkgs = append(pkgs, m.Package)
				fmt.Fprintln(stdout, m.Package)
			}
		}
		return nil
	case "install":
		return usagef("install needs apt-get: run scripts/services install")
	}
	return usagef("unknown action %q: want start, stop, status, env or missing", action)
}

func parseKinds(args []string) ([]servers.Kind, error) {
	if len(args) == 0 {
		return servers.Kinds, nil
	}
	var kinds []servers.Kind
	for _, a := range args {
		k, err := servers.ParseKind(a)
		if err != nil {
			return nil, usagef("unknown server %q: want postgres, redis, etcd, zookeeper, nats or jaeger", a)
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds, nil
}

// servicesStart starts kinds within timeout; nats and jaeger are built
// first when asked for (a first build is not counted in the timeout).
func servicesStart(ctx context.Context, dir string, timeout time.Duration, kinds []servers.Kind, stdout, stderr io.Writer) error {
	begin := time.Now()
	var jaegerBin, natsBin string
	if slices.Contains(kinds, servers.KindNATS) {
		var err error
		if natsBin, err = buildTool(ctx, "nats-server", servers.NATSModule, filepath.Join(dir, "nats-bin"), "half a minute to a minute", servers.NATSBinary, servers.BuildNATS, stderr); err != nil {
			return err
		}
	}
	if slices.Contains(kinds, servers.KindJaeger) {
		var err error
		if jaegerBin, err = buildTool(ctx, "Jaeger", servers.JaegerModule, filepath.Join(dir, "jaeger-bin"), "about 10 minutes", servers.JaegerBinary, servers.BuildJaeger, stderr); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var procs []*servers.Proc
	if others := slices.DeleteFunc(slices.Clone(kinds), func(k servers.Kind) bool { return k == servers.KindJaeger }); len(others) > 0 {
		cfg := servers.SharedConfig()
		cfg.Kinds = others
		cfg.NATS.Binary = natsBin
		set, err := servers.StartSet(ctx, dir, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "aegis services: some servers did not start; the others are running:\n")
			_ = servicesStatus(ctx, dir, others, stderr)
			return err
		}
		procs = set.Procs()
	}
	if jaegerBin != "" {
		j, err := servers.StartJaeger(ctx, filepath.Join(dir, "jaeger"), servers.SharedJaegerConfig(jaegerBin))
		if err != nil {
			return err
		}
		procs = append(procs, j.Proc)
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	for _, p := range procs {
		what := "started"
		if p.Reused() {
			what = "already running"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (pid %d)\n", p.Name(), p.Addr(), what, p.Pid())
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "ready in %.1fs; data and logs in %s\n", time.Since(begin).Seconds(), dir)
	return nil
}

// buildTool builds a server (Jaeger, nats-server) from its tool module
// into cache when its build there is missing or stale, saying so on w, and
// returns the binary's path; path and build are the servers package's
// functions for it, takes how long a first build takes.
func buildTool(ctx context.Context, name, module, cache, takes string,
	path func(module, cache string) (string, error),
	build func(ctx context.Context, module, cache string, log io.Writer) (string, error),
	w io.Writer,
) (string, error) {
	bin, err := path(module, cache)
	if err != nil {
		return "", usagef("%v: run aegis services from the repository's root (scripts/services does)", err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(w, "aegis services: building %s from %s into %s (%s on 2 cores the first time) ...\n", name, module, cache, takes)
	begin := time.Now()
	if bin, err = build(ctx, module, cache, w); err != nil {
		return "", err
	}
	fmt.Fprintf(w, "aegis services: built %s in %s\n", name, time.Since(begin).Round(time.Second))
	return bin, nil
}

// jaegerStarted reports whether the shared Jaeger was started in dir (its
// pid file is there), and with healthy whether it also answers.
func jaegerStarted(ctx context.Context, dir string, healthy bool) bool {
	st, err := servers.Inspect(ctx, dir, servers.KindJaeger)
	if err != nil || len(st) == 0 {
		return false
	}
	return !healthy || st[0].State == servers.StateHealthy
}

func servicesStop(ctx context.Context, dir string, kinds []servers.Kind, stdout io.Writer) error {
	st, err := servers.Inspect(ctx, dir, kinds...)
	if err != nil {
		return err
	}
	if err := servers.StopDir(dir, kinds...); err != nil {
		return err
	}
	for _, s := range st {
		if s.State != servers.StateDead {
			fmt.Fprintf(stdout, "stopped %s (%s, pid %d)\n", s.Name, s.Addr, s.Pid)
		}
	}
	return nil
}

func servicesStatus(ctx context.Context, dir string, kinds []servers.Kind, w io.Writer) error {
	st, err := servers.Inspect(ctx, dir, kinds...)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	var bad []string
	for _, k := range kinds {
		found := false
		for _, s := range st {
			if s.Kind != k {
				continue
			}
			found = true
			detail := fmt.Sprintf("pid %d", s.Pid)
			if s.Err != nil {
				detail += ": " + firstLine(s.Err.Error())
			}
			if s.State != servers.StateHealthy {
				bad = append(bad, s.Name)
				detail += "; log " + s.Log
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Addr, s.State, detail)
		}
		if !found {
			bad = append(bad, string(k))
			fmt.Fprintf(tw, "%s\t-\tnot running\t\n", k)
		}
	}
	_ = tw.Flush()
	if len(bad) > 0 {
		start := "scripts/services start"
		if slices.Contains(kinds, servers.KindJaeger) {
			start += "; jaeger with scripts/services start jaeger"
		}
		return fmt.Errorf("not healthy: %s (start them with %s)", strings.Join(bad, ", "), start)
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
