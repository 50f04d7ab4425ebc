package runner

// A run's node processes: each node's proxies to its servers, its
// process (started again after a kill), its events read from its
// output, and its end.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
)

// nodeProc is one node: its current process and its proxies.
type nodeProc struct {
	n       int
	cfg     lab.NodeConfig
	env     []string
	proxies map[servers.Kind][]*tcpproxy.Proxy
	// origin is the server each proxy was made for (a failover switches
	// its upstream to another).
	origin map[*tcpproxy.Proxy]string

	// The current process, guarded by Run.mu.
	cmd      *exec.Cmd
	spawned  time.Time // when cmd was started
	stdin    io.WriteCloser
	ready    chan struct{}
	exited   chan struct{}
	finished bool
	killed   bool // the exit was a fault's doing
	paused   bool
	critical string // the attempt inside the critical section
	writing  bool   // and it is writing: its work is done
	holding  int64  // the token held, or -1 when holding nothing
	tick     int
	job      string
	lastErr  string // the detail of its last error event
	refused  bool   // a process of it exited on its configuration (lab.NodeExitConfig)
	pong     chan int64
	// faulted: a fault was aimed at the node (paused, killed, cut off,
	// its clock skewed): its late ticks are the fault's doing.
	faulted bool
	// restarting: a kill's restart of the node is under way (the node is
	// down until its process is ready): another kill has nothing more to
	// do, and would start a second process for it.
	restarting bool
	// late is the latest a tick of the node's that it could not start
	// was, after its fire time (misfired events' Late).
	late time.Duration
}

// startNodes creates each node's proxies and process, waits until every
// node is ready, and sends the start time.
func (r *Run) startNodes(ctx context.Context) error {
	env := nodeBaseEnv(r.s.opts.NodeEnv)
	skews := map[int]time.Duration{}
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == lab.Skew {
			skews[ch.Node()] = ch.Offset
		}
	}
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == lab.Latency {
			r.serverFault = true
		}
	}
	for n := 1; n <= r.cfg.Nodes; n++ {
		np := &nodeProc{n: n, holding: -1, proxies: map[servers.Kind][]*tcpproxy.Proxy{}, origin: map[*tcpproxy.Proxy]string{},
			pong: make(chan int64, 8), faulted: skews[n] != 0}
		np.cfg = lab.NodeConfig{
			Run: r.ID, Node: n, Strategy: r.cfg.Strategy, Fence: r.cfg.Fence,
			Tick: r.cfg.Tick, TTL: r.cfg.TTL, Ticks: r.cfg.Ticks(), Window: r.cfg.Window(),
			Skew: skews[n], Store: r.store, Incarnation: 1,
		}
		r.mu.Lock()
		r.nodes = append(r.nodes, np)
		r.mu.Unlock()
		nodeEnv, err := r.proxy(np)
		if err != nil {
			return err
		}
		np.env = append(slices.Clone(env), nodeEnv...)
		if err := r.spawn(np); err != nil {
			return err
		}
	}
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, np := range r.nodes {
		if err := r.waitReady(wait, np); err != nil {
			r.mu.Lock()
			refused := np.refused
			r.mu.Unlock()
			if refused {
				// Its configuration is the run's, not a start that failed:
				// the run goes on without it, and its report is
				// inconclusive, saying why.
				continue
			}
			return err
		}
	}
	r.awaitPrompt(ctx)
	// The first tick fires a moment from now, on the tick grid: every
	// job's fire times (multiples of its cadence since the epoch) are
	// ticks of the run.
	r.mu.Lock()
	first := time.Now().Add(200 * time.Millisecond)
	if r.effective.After(first) {
		first = r.effective // a catalog row fires from its effective time
	}
	// A multiple of the tick since the Unix epoch, as schedule.Interval
	// counts (time.Truncate counts from Go's zero time).
	tick := int64(r.cfg.Tick)
	r.start = time.Unix(0, (first.UnixNano()/tick+1)*tick)
	r.mu.Unlock()
	for _, np := range r.nodes {
		r.sendStart(np)
	}
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == lab.Latency {
			r.setLatency(ch)
		}
	}
	return nil
}

// nodeBaseEnv is our environment without the AEGIS_* server variables,
// plus extra.
func nodeBaseEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AEGIS_") && !strings.HasPrefix(kv, "AEGIS_LAB_DEBUG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// proxy creates the node's proxies, one per server address it uses, and
// returns the AEGIS_* variables (and store) that point the node at them.
func (r *Run) proxy(np *nodeProc) ([]string, error) {
	var env []string
	add := func(k servers.Kind, upstream string) (string, error) {
		p, err := tcpproxy.New(upstream)
		if err != nil {
			return "", fmt.Errorf("lab: %w", err)
		}
		r.mu.Lock()
		np.proxies[k] = append(np.proxies[k], p)
		np.origin[p] = upstream
		r.mu.Unlock()
		return p.Addr(), nil
	}
	if !strings.HasPrefix(r.store, "sqlite:") {
		store := r.store
		if r.onStandby(np.n) {
			store = r.standbyURL
		}
		u, err := url.Parse(store)
		if err != nil || u.Host == "" {
			return nil, errors.New("lab: the PostgreSQL URL must be a postgres:// URL")
		}
		addr, err := add(servers.KindPostgres, u.Host)
		if err != nil {
			return nil, err
		}
		u.Host = addr
		np.cfg.Store = u.String()
		env = append(env, servers.EnvPostgresURL+"="+u.String())
	}
	for _, k := range r.strat.Needs {
		var addrs []string
		switch k {
		case servers.KindRedis, servers.KindZooKeeper:
			for _, a := range r.s.serverAddrs(k) {
				pa, err := add(k, a)
				if err != nil {
					return nil, err
				}
				addrs = append(addrs, pa)
			}
		case servers.KindEtcd:
			for _, a := range r.s.serverAddrs(k) {
				host, with, err := etcdHostPort(a)
				if err != nil {
					return nil, err
				}
				pa, err := add(k, host)
				if err != nil {
					return nil, err
				}
				addrs = append(addrs, with(pa))
			}
		case servers.KindNATS:
			// The nodes' client ignores the servers the cluster
			// advertises (backend's openNATS), so these proxies are its
			// only way to the servers: a partition cuts them all.
			for i, a := range r.s.serverAddrs(k) {
				u, err := url.Parse(a)
				if err != nil || u.Scheme != "nats" || u.Port() == "" {
					return nil, fmt.Errorf("lab: %w: NATS server %d is not a nats://host:port URL (not shown: it may carry a password)", aegis.ErrInvalid, i+1)
				}
				pa, err := add(k, u.Host)
				if err != nil {
					return nil, err
				}
				u.Host = pa
				addrs = append(addrs, u.String())
			}
		default:
			continue
		}
		name := map[servers.Kind]string{servers.KindRedis: servers.EnvRedisAddrs, servers.KindEtcd: servers.EnvEtcdEndpoints, servers.KindZooKeeper: servers.EnvZKServers, servers.KindNATS: servers.EnvNATSURLs}[k]
		env = append(env, name+"="+strings.Join(addrs, ","))
	}
	if r.strat.LeaseFile {
		env = append(env, "AEGIS_SQLITE_PATH="+filepath.Join(r.s.dir, r.ID+"-lease.db"))
	}
	return env, nil
}

// etcdHostPort splits an etcd endpoint, in either form etcd's client
// takes (an http or https URL, or a bare host:port), into the host:port to
// proxy and a function that puts another host:port in its place. An
// endpoint in neither form is an error that quotes it (its password
// masked).
func etcdHostPort(ep string) (string, func(string) string, error) {
	if !strings.Contains(ep, "://") {
		host, port, err := net.SplitHostPort(ep)
		if n, perr := strconv.Atoi(port); err == nil && (net.ParseIP(host) != nil || hostname.MatchString(host)) && perr == nil && n > 0 && n < 1<<16 {
			return ep, func(hp string) string { return hp }, nil
		}
	} else if u, err := url.Parse(ep); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Port() != "" {
		return u.Host, func(hp string) string {
			v := *u
			v.Host = hp
			return v.String()
		}, nil
	} else if err == nil && u.User != nil {
		ep = u.Redacted()
	}
	return "", nil, fmt.Errorf("lab: %w: etcd endpoint %q: want host:port or http://host:port", aegis.ErrInvalid, ep)
}

// hostname is a DNS name, as a bare etcd endpoint's host may be.
var hostname = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// spawn starts np's process (a new incarnation after a kill).
func (r *Run) spawn(np *nodeProc) error {
	r.mu.Lock()
	cfg := np.cfg
	r.mu.Unlock()
	cmd := exec.Command(r.s.opts.Executable, append([]string{"node"}, cfg.Args()...)...)
	cmd.Env = np.env
	// Its own process group: a Ctrl-C reaches the lab, which stops the
	// nodes in order; SIGKILL when the lab dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(r.s.dir, fmt.Sprintf("%s-node%d.log", r.ID, np.n)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return fmt.Errorf("lab: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return fmt.Errorf("lab: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("lab: start node%d: %w", np.n, err)
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	np.cmd, np.stdin, np.ready, np.exited, np.spawned = cmd, stdin, ready, exited, time.Now()
	np.finished, np.killed, np.paused, np.critical, np.holding = false, false, false, "", -1
	r.mu.Unlock()
	r.labEvent(lab.Event{Kind: lab.EventStarted, Node: np.n, Detail: fmt.Sprintf("pid %d, incarnation %d", cmd.Process.Pid, cfg.Incarnation)})
	r.bg.Go(func() {
		defer logf.Close()
		lines := bufio.NewScanner(stdout)
		lines.Buffer(make([]byte, 64<<10), 1<<20)
		for lines.Scan() {
			var ev lab.NodeEvent
			if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
				fmt.Fprintf(logf, "lab: bad event line %q\n", lines.Text())
				continue
			}
			r.onNodeEvent(np, ev, ready)
		}
		err := cmd.Wait()
		how := "exited"
		if err != nil {
			how = err.Error()
		}
		var exit *exec.ExitError
		refused := errors.As(err, &exit) && exit.ExitCode() == lab.NodeExitConfig
		// Whether the run was ending is read before the exit is signalled:
		// the supervisor, woken by the last node's exit, stops the run at
		// once, and this node's end would then read as expected.
		ending := r.ending()
		r.mu.Lock()
		killed, finished, lastErr := np.killed, np.finished, np.lastErr
		np.refused = np.refused || refused
		if refused {
			r.configExits = append(r.configExits, fmt.Sprintf("node%d: %s", np.n, cmp.Or(lastErr, "its flags (log "+logf.Name()+")")))
		}
		np.critical, np.holding = "", -1
		// The exited event and the closed channel together: the supervisor
		// woken by the event sees the node gone (closed after, it could miss
		// it and sleep until its hard timeout).
		close(exited)
		r.addLocked(lab.Event{T: r.secs(time.Now().UnixNano()), Kind: lab.EventExited, Node: np.n, Detail: how})
		for id, a := range r.open {
			if a.node == np.n {
				delete(r.open, id)
			}
		}
		r.settleLocked()
		r.mu.Unlock()
		if !killed && !finished && !ending {
			if lastErr != "" {
				how += " after: " + lastErr
			}
			r.note("node%d %s, before it finished (log %s)", np.n, how, logf.Name())
		}
	})
	return nil
}

func (r *Run) waitReady(ctx context.Context, np *nodeProc) error {
	r.mu.Lock()
	ready, exited := np.ready, np.exited
	r.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("lab: node%d exited before it was ready; its log: %s", np.n, r.nodeLogTail(np))
	case <-ctx.Done():
		return fmt.Errorf("lab: node%d not ready: %w; its log: %s", np.n, ctx.Err(), r.nodeLogTail(np))
	}
}

func (r *Run) nodeLogTail(np *nodeProc) string {
	path := filepath.Join(r.s.dir, fmt.Sprintf("%s-node%d.log", r.ID, np.n))
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return path + ": " + strings.Join(lines, " | ")
}

func (r *Run) sendStart(np *nodeProc) {
	r.mu.Lock()
	stdin, start := np.stdin, r.start
	r.mu.Unlock()
	b, _ := json.Marshal(lab.ControlLine{Start: start.UnixNano()})
	_, _ = stdin.Write(append(b, '\n'))
}

// How promptly the nodes must answer the lab before the run's clock
// starts, and for how long the lab waits for that.
const (
	promptMin  = 50 * time.Millisecond // the bound for ticks up to 200ms; a quarter of the tick above
	promptWait = 30 * time.Second
)

// awaitPrompt pings every ready node until all answer within a quarter
// of a tick (at least promptMin), so that the run's first tick finds
// nodes that can act on it: a node ready but starved (a machine busy with
// other work) would miss its first ticks, and a fault aimed at the holder
// find nobody to aim at. After promptWait the run starts anyway, with a
// note of how slow the nodes were: its report then says why its case may
// not have been reached.
func (r *Run) awaitPrompt(ctx context.Context) {
	bound := max(promptMin, r.cfg.Tick/4)
	began := time.Now()
	for seq := int64(1); ; seq++ {
		slowest, who := r.ping(ctx, seq)
		switch {
		case slowest <= bound:
			if waited := time.Since(began); seq > 1 {
				r.note("the nodes were slow to answer the lab: the run started once every node answered within %s, after %s", bound, waited.Round(time.Millisecond))
			}
			return
		case ctx.Err() != nil:
			return
		case time.Since(began) >= promptWait:
			r.note("the machine is too busy for this run: after %s node%d still took %s (more than %s) to answer the lab; the run started anyway, and its nodes may miss ticks",
				promptWait, who, slowest.Round(time.Millisecond), bound)
			return
		}
		backoff.Sleep(ctx, 100*time.Millisecond) // the machine's load is what is waited for: there is no event
	}
}

// ping sends ping seq to every node and returns the slowest answer and
// its node (an answer not within 5s counts as 5s).
func (r *Run) ping(ctx context.Context, seq int64) (time.Duration, int) {
	r.mu.Lock()
	nodes := slices.Clone(r.nodes)
	r.mu.Unlock()
	b, _ := json.Marshal(lab.ControlLine{Ping: seq})
	sent := time.Now()
	for _, np := range nodes {
		_, _ = np.stdin.Write(append(b, '\n'))
	}
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	var slowest time.Duration
	who := 0
	for _, np := range nodes {
	wait:
		for {
			select {
			case got := <-np.pong:
				if got != seq {
					continue // an earlier ping's late answer
				}
				if d := time.Since(sent); d > slowest {
					slowest, who = d, np.n
				}
				break wait
			case <-timeout.C:
				return 5 * time.Second, np.n
			case <-np.exited:
				return 0, 0 // the start fails on it
			case <-ctx.Done():
				return 0, 0
			}
		}
	}
	return slowest, who
}

// stopNodes ends every node process: stdin closed (the node stops), paused
// ones resumed, and SIGKILL for those still running after a bound.
func (r *Run) stopNodes() {
	r.mu.Lock()
	nodes := slices.Clone(r.nodes)
	r.mu.Unlock()
	// Every node told first, then waited for: one after another, the last
	// would run ticks for as long as the others take to exit.
	type stopping struct {
		cmd    *exec.Cmd
		exited chan struct{}
	}
	var all []stopping
	for _, np := range nodes {
		r.mu.Lock()
		cmd, stdin, exited := np.cmd, np.stdin, np.exited
		np.paused = false
		r.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = stdin.Close()
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		all = append(all, stopping{cmd, exited})
	}
	deadline := time.NewTimer(r.cfg.Work + 10*time.Second)
	defer deadline.Stop()
	late := false
	for _, st := range all {
		if !late {
			select {
			case <-st.exited:
				continue
			case <-deadline.C:
				late = true
			}
		}
		select {
		case <-st.exited:
		default:
			_ = st.cmd.Process.Kill() // past the bound: SIGKILL the rest
			<-st.exited
		}
	}
	r.bgWaitReaders()
}

// bgWaitReaders waits for the readers of every node's output.
func (r *Run) bgWaitReaders() {
	r.mu.Lock()
	nodes := slices.Clone(r.nodes)
	r.mu.Unlock()
	for _, np := range nodes {
		if np.exited != nil {
			<-np.exited
		}
	}
}

// closeProxies closes every node's proxies, outside the run's lock: a
// Close waits for the proxy's goroutines, and Status must answer meanwhile.
func (r *Run) closeProxies() {
	var all []*tcpproxy.Proxy
	r.mu.Lock()
	for _, np := range r.nodes {
		for _, ps := range np.proxies {
			all = append(all, ps...)
		}
	}
	r.mu.Unlock()
	for _, p := range all {
		_ = p.Close()
	}
}

// onStandby reports whether node n is in the second region: the last
// Config.Standby nodes, whose store is the hot standby.
func (r *Run) onStandby(n int) bool { return n > r.cfg.Nodes-r.cfg.Standby }
