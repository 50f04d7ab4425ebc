package servers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KindNATS is nats-server with JetStream: a cluster of three, built from
// the tool module tools/nats ([BuildNATS]), since Debian's package is older
// than the per-key TTLs that lease/natslease needs (2.11).
const KindNATS Kind = "nats"

// EnvNATSURLs tells tests, the lab and the CLI where the NATS servers are:
// nats://host:port,... (every member of the cluster).
const EnvNATSURLs = "AEGIS_NATS_URLS"

// NATSModule is the Go module, relative to the repository's root, that
// pins the nats-server version [BuildNATS] builds (a tool directive).
const NATSModule = "tools/nats"

// natsPackage is nats-server's main package.
const natsPackage = "github.com/nats-io/nats-server/v2"

// natsBinDir is the folder of the scratch directory that holds the build.
const natsBinDir = "nats-bin"

// NATSConfig configures [StartNATS]. The zero value is usable once the
// server is built (see Binary).
type NATSConfig struct {
	// Binary is the path of nats-server ([BuildNATS]'s). Default: the
	// build in the shared scratch directory ($AEGIS_SCRATCH/nats-bin, which
	// `scripts/services start` makes).
	Binary string
	// Members is the number of servers. Default: 3. One server runs
	// without a cluster.
	Members int
	// ClientPorts and ClusterPorts are the servers' ports on 127.0.0.1, one
	// per server. Default: free ports.
	ClientPorts  []int
	ClusterPorts []int
	// Detach runs the servers in their own sessions so that they outlive
	// the caller, and makes the start idempotent (see [EtcdConfig.Detach]).
	// Default: false.
	Detach bool
	// StartTimeout bounds the wait for every server to serve JetStream
	// (the cluster has elected its meta leader). Default: 60 s.
	StartTimeout time.Duration
}

// NATS is a nats-server cluster with JetStream on loopback. Server i (from
// 1) is named nats-i and keeps its configuration, log and JetStream store
// in dir/nats-i.
type NATS struct {
	members []*Proc
}

// StartNATS starts a NATS cluster in dir, or restarts one whose stores are
// there, and returns once every server serves JetStream. cfg may be nil.
// Its errors name what is wrong: no build of nats-server, a port taken,
// the end of a server's log when it does not start.
func StartNATS(ctx context.Context, dir string, cfg *NATSConfig) (*NATS, error) {
	c := NATSConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.Members = cmp.Or(c.Members, 3)
	c.StartTimeout = cmp.Or(c.StartTimeout, 60*time.Second)
	if c.Members < 1 {
		return nil, fmt.Errorf("servers: NATSConfig.Members is %d, want at least 1", c.Members)
	}
	if c.Binary == "" {
		var err error
		if c.Binary, err = SharedNATSBinary(); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return nil, fmt.Errorf("servers: NATSConfig.Binary: %w", err)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, picked, err := clusterPorts(c.Members, [][]int{c.ClientPorts, c.ClusterPorts},
			[]string{"NATSConfig.ClientPorts", "NATSConfig.ClusterPorts"})
		if err != nil {
			return nil, err
		}
		n := newNATS(dir, ports[0], ports[1], c)
		err = startMembers(ctx, n.members)
		if err == nil {
			if err := n.waitPlacement(ctx, c.StartTimeout); err != nil {
				if !c.Detach {
					err = errors.Join(err, n.Stop())
				}
				return nil, err
			}
			return n, nil
		}
		if !picked || attempt == 3 || !isPortConflict(err) {
			return nil, err
		}
	}
}

func newNATS(dir string, client, cluster []int, c NATSConfig) *NATS {
	n := &NATS{}
	for i := range client {
		name := fmt.Sprintf("nats-%d", i+1)
		mdir := filepath.Join(dir, name)
		m := &Proc{
			kind:       KindNATS,
			name:       name,
			dir:        mdir,
			addr:       hostPort(client[i]),
			ports:      []int{client[i], cluster[i]},
			detach:     c.Detach,
			timeout:    c.StartTimeout,
			stopSignal: syscall.SIGTERM,
		}
		if len(client) == 1 {
			m.ports = m.ports[:1]
		}
		m.command = func(context.Context) (*exec.Cmd, error) {
			conf := filepath.Join(mdir, "nats.conf")
			if err := os.WriteFile(conf, []byte(natsConf(name, mdir, i, client, cluster)), 0o644); err != nil {
				return nil, err
			}
			return exec.Command(c.Binary, "--config", conf), nil
		}
		m.wipe = func() error { return os.RemoveAll(filepath.Join(mdir, "data")) }
		n.members = append(n.members, m)
	}
	return n
}

// natsConf is server i's configuration: its client and route ports on
// loopback only, JetStream with its store in mdir/data, small limits (the
// tests keep little), and routes to every other server. The store is
// written without fsync on every message (nats-server's default: a sync
// every 2 minutes), which a killed process does not lose.
func natsConf(name, mdir string, i int, client, cluster []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by aegis on every start; edits are lost.
server_name: %s
listen: %s
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 2GB
}
`, name, hostPort(client[i]), filepath.Join(mdir, "data"))
	if len(client) > 1 {
		var routes []string
		for j, p := range cluster {
			if j != i {
				routes = append(routes, fmt.Sprintf("%q", "nats://"+hostPort(p)))
			}
		}
		fmt.Fprintf(&b, `cluster {
  name: aegis
  listen: %s
  routes: [%s]
}
`, hostPort(cluster[i]), strings.Join(routes, ", "))
	}
	return b.String()
}

// Members returns the servers, nats-1 first.
func (n *NATS) Members() []*Proc { return n.members }

// Addrs returns the servers' client host:port addresses.
func (n *NATS) Addrs() []string { return addrs(n.members) }

// URLs returns the servers' client URLs (nats://127.0.0.1:PORT), as
// nats.Connect wants them, comma-separated.
func (n *NATS) URLs() []string {
	out := n.Addrs()
	for i := range out {
		out[i] = "nats://" + out[i]
	}
	return out
}

// StreamLeader returns the server that leads the JetStream stream named
// stream now, as a running server reports it (the stream's info names its
// leader). It fails when no running server answers or the stream has no
// leader (during an election); wait for a new leader by calling it again
// until it succeeds.
func (n *NATS) StreamLeader(ctx context.Context, stream string) (*Proc, error) {
	var errs []error
	for _, m := range n.members {
		if !m.Running() {
			continue
		}
		leader, err := natsStreamLeader(ctx, m.Addr(), stream)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name(), err))
			continue
		}
		for _, p := range n.members {
			if p.Name() == leader {
				return p, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: the stream's leader is %q, not a server of this cluster", m.Name(), leader))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("servers: stream %s has no leader that a running server knows: %w", stream, errors.Join(errs...))
	}
	return nil, fmt.Errorf("servers: stream %s: no server is running", stream)
}

// natsStreamLeader asks the server at addr for the leader of stream,
// within 2 s: a stream without a leader leaves the question unanswered.
func natsStreamLeader(ctx context.Context, addr, stream string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	nc, err := natsConnect(ctx, addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", err
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("no leader")
	}
	return info.Cluster.Leader, nil
}

// waitPlacement waits, within timeout, until the cluster places a stream
// with a replica on every server: a meta leader (what the start waits
// for) may not yet count every peer current, and a bucket of as many
// replicas created then fails ("no suitable peers for placement"). It
// creates a small stream in memory and deletes it.
func (n *NATS) waitPlacement(ctx context.Context, timeout time.Duration) error {
	if len(n.members) < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := nats.Connect(strings.Join(n.URLs(), ","), nats.Name("aegis-probe"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return fmt.Errorf("servers: nats: connect to place a probe stream: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{Name: "aegis_placement_probe", Subjects: []string{"aegis.placement.probe"},
		Replicas: len(n.members), Storage: jetstream.MemoryStorage}
	for {
		attempt, stop := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.CreateOrUpdateStream(attempt, cfg)
		if err == nil {
			err = js.DeleteStream(attempt, cfg.Name)
		}
		stop()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("servers: nats: no stream of %d replicas could be placed within %s (the cluster's peers not all current): %w", len(n.members), timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops every server (gracefully, at once) and waits.
func (n *NATS) Stop() error {
	defer lockAll(n.members)()
	return stopMembers(n.members)
}

// Heal resumes paused servers, starts stopped or killed ones, and waits
// until every server serves JetStream.
func (n *NATS) Heal(ctx context.Context) error { return healMembers(ctx, n.members) }

// natsConnect connects to the one server at addr, within ctx, without
// reconnecting.
func natsConnect(ctx context.Context, addr string) (*nats.Conn, error) {
	timeout := 2 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	return nats.Connect("nats://"+addr, nats.Timeout(timeout), nats.NoReconnect(), nats.DontRandomize(), nats.Name("aegis-probe"))
}

// probeNATS checks that the server at addr serves JetStream: its account
// info comes back only once the cluster has a meta leader.
func probeNATS(ctx context.Context, addr string) error {
	nc, err := natsConnect(ctx, addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: jetstream: %w", err)
	}
	return nil
}

// NATSBinary returns the path that [BuildNATS] builds nats-server at from
// the tool module in module (see [NATSModule]): in cacheDir, named with a
// hash of the module's go.mod and go.sum, so that a new version is built
// once and an unchanged one never again. It does not say whether the file
// exists.
func NATSBinary(module, cacheDir string) (string, error) {
	return toolBinary("nats-server", NATSModule, module, cacheDir)
}

// SharedNATSBinary returns the nats-server that `scripts/services start`
// built in the shared scratch directory ($AEGIS_SCRATCH/nats-bin): what
// tests that start private servers run. Its error says how to build it.
func SharedNATSBinary() (string, error) {
	dir := filepath.Join(SharedDir(), natsBinDir)
	builds, _ := filepath.Glob(filepath.Join(dir, "nats-server-*"))
	builds = slices.DeleteFunc(builds, func(b string) bool { return strings.Contains(b, ".building-") })
	if len(builds) == 0 {
		return "", fmt.Errorf("servers: nats needs nats-server, which is not built (no build in %s): run `scripts/services start`, which builds it from the Go module %s", dir, NATSModule)
	}
	// One build is kept; a second is one being replaced: take the newest.
	slices.SortFunc(builds, func(a, b string) int { return modTime(b).Compare(modTime(a)) })
	return builds[0], nil
}

func modTime(path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// BuildNATS returns [NATSBinary]'s path, building it when the file is
// missing with the go command on PATH (without the caller's GOFLAGS),
// which writes its output to log; older builds in cacheDir are removed.
// The first build on a cold machine downloads and compiles for about half
// a minute on 2 cores; it ends with ctx. The shared servers' cacheDir is
// $AEGIS_SCRATCH/nats-bin ([SharedNATSBinary]).
func BuildNATS(ctx context.Context, module, cacheDir string, log io.Writer) (string, error) {
	return buildTool(ctx, "nats-server", NATSModule, natsPackage, module, cacheDir, log)
}
