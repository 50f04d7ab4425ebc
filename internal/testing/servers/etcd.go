package servers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// EtcdConfig configures [StartEtcd]. The zero value is usable.
type EtcdConfig struct {
	// Members is the number of members. Default: 3.
	Members int
	// ClientPorts and PeerPorts are the members' ports on 127.0.0.1, one
	// per member. Default: free ports.
	ClientPorts []int
	PeerPorts   []int
	// HeartbeatInterval and ElectionTimeout are etcd's raft timings, short
	// so that a test's leader change takes well under a second.
	// Defaults: 50 ms and 500 ms.
	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// Detach runs the members in their own sessions so that they outlive
	// the caller, and makes the start idempotent: healthy members already
	// running from dir are adopted. Default: false (members get SIGKILL
	// when the caller's process dies).
	Detach bool
	// StartTimeout bounds the wait for every member to report a healthy
	// cluster. Default: 60 s.
	StartTimeout time.Duration
}

// Etcd is an etcd cluster on loopback. Member i (from 1) is named etcd-i
// and keeps its data and log in dir/etcd-i.
type Etcd struct {
	members []*Proc
}

// StartEtcd starts an etcd cluster in dir, or restarts one whose data is
// there, and returns once every member reports a healthy cluster. cfg may
// be nil.
func StartEtcd(ctx context.Context, dir string, cfg *EtcdConfig) (*Etcd, error) {
	c := EtcdConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.Members = cmp.Or(c.Members, 3)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, 50*time.Millisecond)
	c.ElectionTimeout = cmp.Or(c.ElectionTimeout, 500*time.Millisecond)
	c.StartTimeout = cmp.Or(c.StartTimeout, 60*time.Second)
	switch {
	case c.Members < 1:
		return nil, fmt.Errorf("servers: EtcdConfig.Members is %d, want at least 1", c.Members)
	case c.HeartbeatInterval < time.Millisecond:
		return nil, fmt.Errorf("servers: EtcdConfig.HeartbeatInterval is %s, want at least 1ms", c.HeartbeatInterval)
	case c.ElectionTimeout < 5*c.HeartbeatInterval:
		return nil, fmt.Errorf("servers: EtcdConfig.ElectionTimeout is %s, want at least 5 × HeartbeatInterval", c.ElectionTimeout)
	}
	if _, err := etcdBinary(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, picked, err := clusterPorts(c.Members, [][]int{c.ClientPorts, c.PeerPorts},
			[]string{"EtcdConfig.ClientPorts", "EtcdConfig.PeerPorts"})
		if err != nil {
			return nil, err
		}
		e := newEtcd(dir, ports[0], ports[1], c)
		err = startMembers(ctx, e.members)
		if err == nil {
			return e, nil
		}
		if !picked || attempt == 3 || !isPortConflict(err) {
			return nil, err
		}
	}
}

func newEtcd(dir string, client, peer []int, c EtcdConfig) *Etcd {
	sum := sha256.Sum256([]byte(dir))
	token := "aegis-" + hex.EncodeToString(sum[:6]) // a cluster per directory
	var initial []string
	for i := range client {
		initial = append(initial, fmt.Sprintf("etcd-%d=http://%s", i+1, hostPort(peer[i])))
	}
	e := &Etcd{}
	for i := range client {
		name := fmt.Sprintf("etcd-%d", i+1)
		mdir := filepath.Join(dir, name)
		caddr, paddr := hostPort(client[i]), hostPort(peer[i])
		m := &Proc{
			kind:       KindEtcd,
			name:       name,
			dir:        mdir,
			addr:       caddr,
			ports:      []int{client[i], peer[i]},
			detach:     c.Detach,
			timeout:    c.StartTimeout,
			stopSignal: syscall.SIGTERM,
		}
		m.command = func(context.Context) (*exec.Cmd, error) {
			bin, err := etcdBinary()
			if err != nil {
				return nil, err
			}
			cmd := exec.Command(bin,
				"--name", name,
				"--data-dir", filepath.Join(mdir, "data"),
				"--listen-client-urls", "http://"+caddr,
				"--advertise-client-urls", "http://"+caddr,
				"--listen-peer-urls", "http://"+paddr,
				"--initial-advertise-peer-urls", "http://"+paddr,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new", // ignored once data exists
				"--initial-cluster-token", token,
				"--heartbeat-interval", strconv.FormatInt(c.HeartbeatInterval.Milliseconds(), 10),
				"--election-timeout", strconv.FormatInt(c.ElectionTimeout.Milliseconds(), 10),
				"--logger", "zap", "--log-outputs", "stderr",
			)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "ETCD_") { // they would conflict with the flags
					cmd.Env = append(cmd.Env, kv)
				}
			}
			return cmd, nil
		}
		e.members = append(e.members, m)
	}
	return e
}

// Members returns the members, etcd-1 first.
func (e *Etcd) Members() []*Proc { return e.members }

// Addrs returns the members' client host:port addresses.
func (e *Etcd) Addrs() []string { return addrs(e.members) }

// Endpoints returns the members' client URLs (http://127.0.0.1:PORT), as
// clientv3.Config.Endpoints wants them.
func (e *Etcd) Endpoints() []string {
	out := e.Addrs()
	for i := range out {
		out[i] = "http://" + out[i]
	}
	return out
}

// Leader returns the member that leads the cluster now, as the running
// members report it. It fails when no member answers or none knows a
// leader (during an election, or without a quorum); wait for a new leader
// by calling it again until it succeeds.
func (e *Etcd) Leader(ctx context.Context) (*Proc, error) {
	ids := map[string]*Proc{}
	leader := ""
	var errs []error
	for _, m := range e.members {
		if !m.Running() {
			continue
		}
		st, err := etcdMemberStatus(ctx, m.Addr())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name(), err))
			continue
		}
		ids[st.Header.MemberID] = m
		if st.Leader != "" && st.Leader != "0" {
			leader = st.Leader
		}
	}
	if m, ok := ids[leader]; ok {
		return m, nil
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("servers: etcd has no leader that a running member knows: %w", errors.Join(errs...))
	}
	return nil, errors.New("servers: etcd has no leader that a running member knows")
}

// Stop stops every member gracefully and waits: the followers first, at
// once, then the leader once it has noticed (a leader stopped while it
// believes a follower is still there waits seconds for a leadership
// transfer that cannot happen).
func (e *Etcd) Stop() error {
	defer lockAll(e.members)()
	return stopEtcdMembers(e.members)
}

func stopEtcdMembers(members []*Proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ids := map[string]*Proc{}
	leader := ""
	for _, m := range members {
		if !m.Running() {
			continue
		}
		if st, err := etcdMemberStatus(ctx, m.Addr()); err == nil {
			ids[st.Header.MemberID] = m
			leader = cmp.Or(leader, st.Leader)
		}
	}
	var first, last []*Proc
	for _, m := range members {
		if m == ids[leader] {
			last = append(last, m)
		} else {
			first = append(first, m)
		}
	}
	err := stopMembers(first)
	for _, m := range last {
		waitNoActivePeers(m.Addr(), 3*time.Second)
	}
	return errors.Join(err, stopMembers(last))
}

// waitNoActivePeers waits, within bound, until the etcd member at addr
// counts no active peer (its etcd_network_active_peers gauges are all 0):
// a leader that still believes a stopped follower is connected spends
// seconds trying to hand its leadership over to it before it stops.
func waitNoActivePeers(addr string, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		active, err := etcdActivePeers(ctx, addr)
		cancel()
		if err != nil || active == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Heal resumes paused members, starts stopped or killed ones, and waits
// until every member reports a healthy cluster.
func (e *Etcd) Heal(ctx context.Context) error { return healMembers(ctx, e.members) }

// clusterPorts returns, for each group of ports (client, peer, ...), the
// given ports, or free ones for every member when none is given.
func clusterPorts(n int, given [][]int, fields []string) (groups [][]int, picked bool, err error) {
	anyGiven := false
	for _, g := range given {
		anyGiven = anyGiven || len(g) > 0
	}
	if anyGiven {
		for i, g := range given {
			ports, _, err := pickPorts(fields[i], g, n)
			if err != nil {
				return nil, false, err
			}
			groups = append(groups, ports)
		}
		return groups, false, nil
	}
	ports, err := FreePorts(len(given) * n)
	if err != nil {
		return nil, false, err
	}
	for i := range given {
		groups = append(groups, ports[i*n:(i+1)*n])
	}
	return groups, true, nil
}
