package servers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ZooKeeperConfig configures [StartZooKeeper]. The zero value is usable.
type ZooKeeperConfig struct {
	// Members is the number of members. Default: 3. One member runs
	// standalone.
	Members int
	// ClientPorts, QuorumPorts and ElectionPorts are the members' ports on
	// 127.0.0.1, one per member. Default: free ports.
	ClientPorts   []int
	QuorumPorts   []int
	ElectionPorts []int
	// TickTime is ZooKeeper's tick. Sessions time out after 2 to 300
	// ticks (so 400 ms at least by default, and at most 60 s), followers
	// are dropped after 10 silent ticks. Default: 200 ms.
	TickTime time.Duration
	// MaxHeap is the JVM's -Xmx. Default: "256m".
	MaxHeap string
	// Detach runs the members in their own sessions so that they outlive
	// the caller, and makes the start idempotent: healthy members already
	// running from dir are adopted. Default: false (members get SIGKILL
	// when the caller's process dies).
	Detach bool
	// StartTimeout bounds the wait for every member to serve. Default:
	// 90 s (three JVMs starting on two cores).
	StartTimeout time.Duration
}

// ZooKeeper is a ZooKeeper ensemble on loopback, with the four-letter
// commands enabled and the admin server disabled. Member i (from 1) is
// named zookeeper-i and keeps its configuration, data and log in
// dir/zookeeper-i.
type ZooKeeper struct {
	members []*Proc
}

// StartZooKeeper starts a ZooKeeper ensemble in dir, or restarts one whose
// data is there, and returns once every member serves (answers srvr with
// its mode). cfg may be nil.
func StartZooKeeper(ctx context.Context, dir string, cfg *ZooKeeperConfig) (*ZooKeeper, error) {
	c := ZooKeeperConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.Members = cmp.Or(c.Members, 3)
	c.TickTime = cmp.Or(c.TickTime, 200*time.Millisecond)
	c.MaxHeap = cmp.Or(c.MaxHeap, "256m")
	c.StartTimeout = cmp.Or(c.StartTimeout, 90*time.Second)
	switch {
	case c.Members < 1:
		return nil, fmt.Errorf("servers: ZooKeeperConfig.Members is %d, want at least 1", c.Members)
	case c.TickTime < 10*time.Millisecond:
		return nil, fmt.Errorf("servers: ZooKeeperConfig.TickTime is %s, want at least 10ms", c.TickTime)
	}
	if _, err := zookeeperJava(); err != nil {
		return nil, err
	}
	if _, err := zookeeperClasspath(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, picked, err := clusterPorts(c.Members, [][]int{c.ClientPorts, c.QuorumPorts, c.ElectionPorts},
			[]string{"ZooKeeperConfig.ClientPorts", "ZooKeeperConfig.QuorumPorts", "ZooKeeperConfig.ElectionPorts"})
		if err != nil {
			return nil, err
		}
		z := newZooKeeper(dir, ports[0], ports[1], ports[2], c)
		err = startMembers(ctx, z.members)
		if err == nil {
			return z, nil
		}
		if !picked || attempt == 3 || !isPortConflict(err) {
			return nil, err
		}
	}
}

func newZooKeeper(dir string, client, quorum, election []int, c ZooKeeperConfig) *ZooKeeper {
	var servers strings.Builder
	if len(client) > 1 { // one member runs standalone
		for i := range client {
			fmt.Fprintf(&servers, "server.%d=127.0.0.1:%d:%d\n", i+1, quorum[i], election[i])
		}
	}
	z := &ZooKeeper{}
	for i := range client {
		name := fmt.Sprintf("zookeeper-%d", i+1)
		mdir := filepath.Join(dir, name)
		data := filepath.Join(mdir, "data")
		m := &Proc{
			kind:       KindZooKeeper,
			name:       name,
			dir:        mdir,
			addr:       hostPort(client[i]),
			ports:      []int{client[i], quorum[i], election[i]},
			detach:     c.Detach,
			timeout:    c.StartTimeout,
			stopSignal: syscall.SIGTERM,
		}
		if len(client) == 1 {
			m.ports = m.ports[:1]
		}
		id := i + 1
		m.command = func(context.Context) (*exec.Cmd, error) {
			java, err := zookeeperJava()
			if err != nil {
				return nil, err
			}
			cp, err := zookeeperClasspath()
			if err != nil {
				return nil, err
			}
			if err := os.MkdirAll(data, 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
				return nil, err
			}
			conf := filepath.Join(mdir, "zoo.cfg")
			if err := os.WriteFile(conf, []byte(zooCfg(data, client[i], c.TickTime)+servers.String()), 0o644); err != nil {
				return nil, err
			}
			return exec.Command(java,
				"-Xmx"+c.MaxHeap, "-Xms32m", "-Xss512k",
				"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", // fast start, little CPU on small machines
				"-XX:-UsePerfData", "-XX:+ExitOnOutOfMemoryError",
				"-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
				"-Dzookeeper.admin.enableServer=false",
				"-Dzookeeper.4lw.commands.whitelist=*",
				"-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
				"-Dorg.slf4j.simpleLogger.showDateTime=true",
				"-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
				"-cp", cp,
				"org.apache.zookeeper.server.quorum.QuorumPeerMain", conf,
			), nil
		}
		m.wipe = func() error { return os.RemoveAll(data) }
		z.members = append(z.members, m)
	}
	return z
}

func zooCfg(data string, clientPort int, tick time.Duration) string {
	return fmt.Sprintf(`# Written by aegis on every start; edits are lost.
tickTime=%d
initLimit=50
syncLimit=10
maxSessionTimeout=%d
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
forceSync=no
preAllocSize=4096
`, tick.Milliseconds(), 300*tick.Milliseconds(), data, clientPort)
}

// Members returns the members, zookeeper-1 first.
func (z *ZooKeeper) Members() []*Proc { return z.members }

// Addrs returns the members' client host:port addresses, as zk.Connect
// wants them.
func (z *ZooKeeper) Addrs() []string { return addrs(z.members) }

// Leader returns the member that leads the ensemble now (the only member
// when it runs standalone). It fails when no running member is the leader
// (during an election, or without a quorum); wait for a new leader by
// calling it again until it succeeds.
func (z *ZooKeeper) Leader(ctx context.Context) (*Proc, error) {
	var errs []error
	for _, m := range z.members {
		if !m.Running() {
			continue
		}
		mode, err := zooKeeperMode(ctx, m.Addr())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name(), err))
			continue
		}
		if mode == "leader" || mode == "standalone" {
			return m, nil
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("servers: zookeeper has no leader among its running members: %w", errors.Join(errs...))
	}
	return nil, errors.New("servers: zookeeper has no leader among its running members")
}

// Stop stops every member (gracefully, at once) and waits.
func (z *ZooKeeper) Stop() error {
	defer lockAll(z.members)()
	return stopMembers(z.members)
}

// Heal resumes paused members, starts stopped or killed ones, and waits
// until every member serves.
func (z *ZooKeeper) Heal(ctx context.Context) error { return healMembers(ctx, z.members) }
