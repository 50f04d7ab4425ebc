package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/tool/backend"
	"github.com/aegislab/aegis/internal/tool/servers"
	"github.com/aegislab/aegis/schedule"
)

// Inject applies a fault now, whatever its At: a pause or partition lasts
// its For, a kill restarts the node (or the server member), a crash
// restarts PostgreSQL, a skew changes the node's clock from now on, a
// latency applies to the node's connections from now on. It returns once
// the fault has begun (for a holder or writer target, once a node is in
// the critical section or its write, or with an error if none is before
// ctx ends); its end is reported as a healed event. A fault that kills,
// restarts or fails over a server holds that server for the run until it
// ends, and is refused while another run of the session holds it.
func (r *Run) Inject(ctx context.Context, ch Chaos) error {
	if n := ch.Node(); n > r.cfg.Nodes {
		return invalid("--chaos %s: node%d does not exist: the run has %d nodes", ch, n, r.cfg.Nodes)
	}
	if err := r.cfg.checkChaos(r.strat, ch); err != nil && ch.Kind != Skew {
		return invalid("--chaos %s: %v", ch, err)
	}
	if err := r.s.admitChaos(ch); err != nil {
		return err
	}
	select {
	case <-r.done:
		return errors.New("the run has ended")
	default:
	}
	if err := r.s.hold(r, ch); err != nil {
		return err
	}
	began := make(chan error, 1)
	r.chaos.Go(func() {
		ctx, cancel := r.lifetime()
		defer cancel()
		if err := r.applyNotify(ctx, ch, began); err != nil {
			r.note("%s: %v", ch, err)
		}
	})
	select {
	case err := <-began:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// apply applies a scheduled fault.
func (r *Run) apply(ctx context.Context, ch Chaos) error {
	return r.applyNotify(ctx, ch, make(chan error, 1))
}

// applyNotify applies ch, sends on began once it has begun (or failed),
// and returns when it has ended.
func (r *Run) applyNotify(ctx context.Context, ch Chaos, began chan<- error) (err error) {
	sent := false
	begin := func(err error) {
		if !sent {
			sent = true
			began <- err
		}
	}
	defer func() { begin(err) }()
	if _, ok := ch.server(); ok || ch.Kind == Latency {
		r.mu.Lock()
		r.serverFault = true
		r.mu.Unlock()
	}
	switch ch.Kind {
	case Pause:
		np, detail, err := r.target(ctx, ch)
		if err != nil {
			return err
		}
		pid, err := r.signal(np, syscall.SIGSTOP)
		if err != nil {
			return err
		}
		r.mu.Lock()
		np.paused = true
		r.mu.Unlock()
		r.labEvent(Event{Kind: EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d (pid %d) paused with SIGSTOP for %s%s", ch, np.n, pid, ch.For, detail)})
		begin(nil)
		backoff.Sleep(ctx, ch.For) // a stopped run resumes at once
		r.mu.Lock()
		np.paused = false
		r.mu.Unlock()
		_, _ = r.signal(np, syscall.SIGCONT)
		r.labEvent(Event{Kind: EventHealed, Node: np.n, Detail: fmt.Sprintf("node%d resumed with SIGCONT", np.n)})
		return nil
	case Kill:
		if k, ok := ch.server(); ok {
			return r.killMember(ctx, ch, k, begin)
		}
		np, detail, err := r.target(ctx, ch)
		if err != nil {
			return err
		}
		r.mu.Lock()
		np.killed = true
		exited := np.exited
		r.mu.Unlock()
		pid, err := r.signal(np, syscall.SIGKILL)
		if err != nil {
			return err
		}
		<-exited
		r.labEvent(Event{Kind: EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d (pid %d) killed with SIGKILL%s; restarting it", ch, np.n, pid, detail)})
		begin(nil)
		if ctx.Err() != nil {
			r.mu.Lock()
			np.killed = false
			r.mu.Unlock()
			return nil
		}
		r.mu.Lock()
		np.cfg.Incarnation++
		r.mu.Unlock()
		if err := r.spawn(np); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := r.waitReady(wctx, np); err != nil {
			return err
		}
		r.sendStart(np)
		return nil
	case Partition:
		np, detail, err := r.target(ctx, ch)
		if err != nil {
			return err
		}
		cut, kept := r.proxiesOf(np, servers.Kind(ch.Server))
		if len(cut) == 0 {
			return fmt.Errorf("node%d has no connection to %s to cut", np.n, ch.Server)
		}
		for _, p := range cut {
			p.Cut()
		}
		from := "its servers"
		if ch.Server != "" {
			from = ch.Server + " only"
			if len(kept) > 0 {
				from += " (" + strings.Join(kept, " and ") + " still reachable)"
			}
		}
		r.labEvent(Event{Kind: EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d cut from %s for %s (connections dropped, new ones refused)%s", ch, np.n, from, ch.For, detail)})
		begin(nil)
		backoff.Sleep(ctx, ch.For)
		for _, p := range cut {
			p.Heal()
		}
		r.labEvent(Event{Kind: EventHealed, Node: np.n, Detail: fmt.Sprintf("node%d's partition healed", np.n)})
		return nil
	case Skew:
		np := r.node(ch.Node())
		r.mu.Lock()
		np.faulted = true
		stdin := np.stdin
		np.cfg.Skew = ch.Offset
		r.mu.Unlock()
		b, _ := json.Marshal(controlLine{Skew: ptr(int64(ch.Offset))})
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("tell node%d its skew: %w", np.n, err)
		}
		r.labEvent(Event{Kind: EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d's clock is now %s off", ch, np.n, ch.Offset)})
		return nil
	case Edit:
		return r.edit(ctx, ch)
	case Latency:
		r.setLatency(ch)
		r.labEvent(Event{Kind: EventChaos, Detail: ch.String()})
		return nil
	case Failover:
		return r.failover(ctx, ch, begin)
	case Restart:
		return r.restartRedis(ctx, ch)
	case Crash:
		return r.crashPostgres(ctx, ch, begin)
	}
	return fmt.Errorf("unknown fault %q", ch.Kind)
}

func ptr[T any](v T) *T { return &v }

func (r *Run) node(n int) *nodeProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[n-1]
}

// target returns the node a fault targets: nodeN; for holder the node
// doing its work inside the critical section now (it has read, and not
// begun its write), or else the next one to enter it; for writer the node
// inside its write now, or else the next one to begin a write.
func (r *Run) target(ctx context.Context, ch Chaos) (*nodeProc, string, error) {
	np, detail, err := r.findTarget(ctx, ch)
	if np != nil {
		r.mu.Lock()
		np.faulted = true
		r.mu.Unlock()
	}
	return np, detail, err
}

func (r *Run) findTarget(ctx context.Context, ch Chaos) (*nodeProc, string, error) {
	switch ch.Target {
	case Holder:
		return r.holder(ctx)
	case Writer:
		return r.writer(ctx)
	}
	return r.node(ch.Node()), "", nil
}

func (r *Run) holder(ctx context.Context) (*nodeProc, string, error) {
	since := time.Now()
	r.mu.Lock()
	for _, id := range r.order {
		a := r.sections[id]
		np := r.nodes[a.Node-1]
		if np.critical == id && !np.paused && !np.writing && a.ReadResult == OpOK {
			r.mu.Unlock()
			return np, holderDetail(a.Job, a.Tick, a.Token), nil
		}
	}
	r.mu.Unlock()
	e, err := r.waitEvent(ctx, func(e Event) bool {
		if e.Kind != EventEntered {
			return false
		}
		return !r.nodes[e.Node-1].paused // r.mu is held by addLocked
	})
	if err != nil {
		return nil, "", fmt.Errorf("no node entered the critical section in the %s it waited, to the run's end: nothing to target", waited(since))
	}
	return r.node(e.Node), holderDetail(e.Job, e.Tick, e.Token), nil
}

// writer returns the node inside its write to the store now (of several,
// the last to begin: the least likely to be done before the fault lands),
// or else the next node to begin a write. It reads the nodes' events: a
// node is inside its write from its writing event to the attempt's
// outcome (executed, stale, abandoned) or the end of its process.
func (r *Run) writer(ctx context.Context) (*nodeProc, string, error) {
	since := time.Now()
	r.mu.Lock()
	inside := map[int]map[string]int{} // node → attempt → index of its writing event
	for i, e := range r.events {
		if e.Node == 0 {
			continue
		}
		switch e.Kind {
		case EventWriting:
			if inside[e.Node] == nil {
				inside[e.Node] = map[string]int{}
			}
			inside[e.Node][e.Attempt] = i
		case EventExecuted, EventStale, EventAbandon:
			delete(inside[e.Node], e.Attempt)
		case EventStarted, EventExited:
			delete(inside, e.Node)
		}
	}
	last := -1
	for n, attempts := range inside {
		if np := r.nodes[n-1]; np.paused || np.killed {
			continue
		}
		for _, i := range attempts {
			last = max(last, i)
		}
	}
	if last >= 0 {
		e := r.events[last]
		np := r.nodes[e.Node-1]
		r.mu.Unlock()
		return np, writerDetail(e.Job, e.Tick, e.Token), nil
	}
	r.mu.Unlock()
	e, err := r.waitEvent(ctx, func(e Event) bool {
		if e.Kind != EventWriting {
			return false
		}
		np := r.nodes[e.Node-1] // r.mu is held by addLocked
		return !np.paused && !np.killed
	})
	if err != nil {
		return nil, "", fmt.Errorf("no node began a write to the store in the %s it waited, to the run's end: nothing to target", waited(since))
	}
	return r.node(e.Node), writerDetail(e.Job, e.Tick, e.Token), nil
}

// waited is the time since a fault began to wait for its target.
func waited(since time.Time) time.Duration { return time.Since(since).Round(time.Millisecond) }

func writerDetail(job string, tick int, token int64) string {
	if token == 0 {
		return fmt.Sprintf(", the writer, inside its write of %s tick %d", job, tick)
	}
	return fmt.Sprintf(", the writer, inside its write of %s tick %d with token %d", job, tick, token)
}

func holderDetail(job string, tick int, token int64) string {
	if token == 0 {
		return fmt.Sprintf(", the holder, inside %s tick %d", job, tick)
	}
	return fmt.Sprintf(", the holder, inside %s tick %d with token %d", job, tick, token)
}

// signal signals np's current process and returns its pid.
func (r *Run) signal(np *nodeProc, sig syscall.Signal) (int, error) {
	r.mu.Lock()
	cmd, exited := np.cmd, np.exited
	r.mu.Unlock()
	select {
	case <-exited:
		return 0, fmt.Errorf("node%d is not running", np.n)
	default:
	}
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return pid, fmt.Errorf("signal node%d: %w", np.n, err)
	}
	return pid, nil
}

// proxy is what faults need of a proxy.
type proxy interface {
	Cut()
	Heal()
	SetLatency(time.Duration)
	SetUpstream(string)
	Upstream() string
}

// proxiesOf returns np's proxies to the servers of kind k (all of them
// when k is ""), and the kinds it has proxies to besides.
func (r *Run) proxiesOf(np *nodeProc, k servers.Kind) (cut []proxy, kept []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, kind := range servers.Kinds {
		ps := np.proxies[kind]
		if len(ps) == 0 {
			continue
		}
		if k != "" && kind != k {
			kept = append(kept, string(kind))
			continue
		}
		for _, p := range ps {
			cut = append(cut, p)
		}
	}
	return cut, kept
}

func (r *Run) setLatency(ch Chaos) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, np := range r.nodes {
		for _, p := range np.proxies[servers.Kind(ch.Target)] {
			p.SetLatency(ch.Offset)
		}
	}
}

// failover loses the primary before it replicates a grant its holder
// works under: the replication link is cut, then the primary is killed
// as soon as a node granted the lease after the cut has read the ledger
// with that grant's token (it is inside the critical section, doing its
// work), the replica promoted, and every node's proxy switched to it. The
// promoted replica never saw that grant, so a successor can be granted the
// key while the holder still works.
func (r *Run) failover(ctx context.Context, ch Chaos, begin func(error)) error {
	r.s.mu.Lock()
	primary, replica, link := r.s.redis[0], r.s.replica, r.s.replLink
	r.s.mu.Unlock()
	link.Cut()
	r.mu.Lock()
	r.failedOver = true // from here on, the end of the run heals Redis
	cut := len(r.events)
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: replication from the primary %s to its replica %s cut; waiting for a node granted the lease from now on to enter the critical section", ch, primary.Addr(), replica.Addr())})
	begin(nil)
	e, err := r.waitEvent(ctx, func(e Event) bool {
		// r.mu is held by addLocked: the events since the cut are stable.
		if e.Kind != EventEntered || e.Token == 0 || r.nodes[e.Node-1].paused {
			return false
		}
		for _, g := range r.events[cut:] {
			if g.Kind == EventAcquired && g.Node == e.Node && g.Job == e.Job && g.Tick == e.Tick && g.Token == e.Token {
				return true
			}
		}
		return false
	})
	if err != nil {
		return errors.New("no node granted the lease after replication was cut entered the critical section: nothing to lose")
	}
	if err := primary.Kill(); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := servers.RedisCommand(pctx, replica.Addr(), "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("promote the replica: %w", err)
	}
	r.mu.Lock()
	for _, np := range r.nodes {
		for _, p := range np.proxies[servers.KindRedis] {
			if p.Upstream() == primary.Addr() {
				p.SetUpstream(replica.Addr())
			}
		}
	}
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Node: e.Node, Job: e.Job, Tick: e.Tick, Token: e.Token, Detail: fmt.Sprintf(
		"%s: primary %s killed while node%d, granted token %d for %s tick %d after replication was cut, works inside the critical section; replica %s, which never received that grant, promoted and the nodes switched to it",
		ch, primary.Addr(), e.Node, e.Token, e.Job, e.Tick, replica.Addr())})
	return nil
}

// restartRedis restarts a Redis server of the strategy without
// persistence: it comes back empty, its token counters gone. For redis it
// is the single-node one the nodes use now: the first address, or after a
// failover the promoted replica, which comes back a primary; for redlock
// the first Redlock node (the second address: of six or more, the first is
// the single-node one), or a majority of them.
func (r *Run) restartRedis(ctx context.Context, ch Chaos) error {
	// An empty Redis restarted shows nothing: the restart waits until a
	// node has worked under a lease (and, fenced, registered its token),
	// so that the counters it loses are ones a later grant repeats.
	entered := func(e Event) bool { return e.Kind == EventEntered && e.Node > 0 }
	r.mu.Lock()
	granted := slices.ContainsFunc(r.events, entered)
	r.mu.Unlock()
	waited := ""
	if !granted {
		e, err := r.waitEvent(ctx, entered)
		if err != nil {
			return errors.New("no node entered the critical section: no counter to lose")
		}
		waited = fmt.Sprintf(" at node%d's first entry into the critical section (none before %s)", e.Node, ch.At)
	}
	r.s.mu.Lock()
	primary := r.s.redis[0]
	if r.strat.Redis == RedisQuorum {
		var addrs []string
		for _, rs := range r.s.redis {
			addrs = append(addrs, rs.Addr())
		}
		first := backend.RedlockAddrs(addrs)[0]
		for _, rs := range r.s.redis {
			if rs.Addr() == first {
				primary = rs
			}
		}
	}
	restart := []*servers.Redis{primary}
	if ch.Target == redlockMajority {
		var addrs []string
		for _, rs := range r.s.redis {
			addrs = append(addrs, rs.Addr())
		}
		nodes := backend.RedlockAddrs(addrs)
		restart = nil
		for _, a := range nodes[:len(nodes)/2+1] {
			for _, rs := range r.s.redis {
				if rs.Addr() == a {
					restart = append(restart, rs)
				}
			}
		}
	}
	all := append(slices.Clone(r.s.redis), r.s.replica)
	r.s.mu.Unlock()
	var names []string
	for _, rs := range restart {
		promoted := false
		if use := r.redisInUse(rs.Addr()); use != rs.Addr() {
			// A failover switched the nodes to the replica: that is the
			// server whose keys they depend on now.
			i := slices.IndexFunc(all, func(x *servers.Redis) bool { return x.Addr() == use })
			if i < 0 {
				return fmt.Errorf("the nodes use Redis %s, which is not the lab's", use)
			}
			rs, promoted = all[i], true
		}
		if err := rs.Restart(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		if promoted {
			// It starts as the replica its configuration says; it stays
			// the primary the failover made it (the end of the run makes it
			// a replica again).
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, err := servers.RedisCommand(pctx, rs.Addr(), "REPLICAOF", "NO", "ONE")
			cancel()
			if err != nil {
				return fmt.Errorf("restarted %s, promote it again: %w", rs.Addr(), err)
			}
		}
		names = append(names, rs.Addr())
	}
	r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: %s restarted without persistence%s: their keys and token counters are gone", ch, strings.Join(names, ", "), waited)})
	return nil
}

// redisInUse returns the Redis address the run's nodes reach through
// their proxy to addr: addr itself, or the server a failover switched them
// to.
func (r *Run) redisInUse(addr string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, np := range r.nodes {
		for _, p := range np.proxies[servers.KindRedis] {
			if np.origin[p] == addr {
				return p.Upstream()
			}
		}
	}
	return addr
}

// healRedis puts the lab's Redis back as it was after a failover: a fresh
// primary at the first address and the replica following it.
func (r *Run) healRedis() {
	r.mu.Lock()
	failedOver := r.failedOver
	r.mu.Unlock()
	if !failedOver {
		return
	}
	r.s.mu.Lock()
	primary, replica, link := r.s.redis[0], r.s.replica, r.s.replLink
	r.s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := primary.Start(ctx); err != nil { // a no-op when it still runs
		r.note("heal Redis after the failover: %v", err)
		return
	}
	link.Heal()
	host, port, _ := net.SplitHostPort(link.Addr())
	if _, err := servers.RedisCommand(ctx, replica.Addr(), "REPLICAOF", host, port); err != nil {
		r.note("heal Redis after the failover: %v", err)
	}
}

// crashPostgres kills the lab's PostgreSQL with SIGKILL (its backends die
// with it: every connection drops, and what was not committed is lost)
// and restarts it at once on the same port and data directory, where it
// runs crash recovery from its WAL. The session's PostgreSQL is durable,
// so every commit a node was told of survives.
func (r *Run) crashPostgres(ctx context.Context, ch Chaos, begin func(error)) error {
	r.s.mu.Lock()
	pg := r.s.pg
	r.s.mu.Unlock()
	if pg == nil {
		return errors.New("the lab has no PostgreSQL of its own to crash")
	}
	pid := pg.Pid()
	killed := time.Now()
	if err := pg.Kill(); err != nil {
		return err
	}
	r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: postgres (pid %d) killed with SIGKILL, its backends with it: every connection dropped; restarting it on the same port and data directory (crash recovery)", ch, pid)})
	begin(nil)
	// The store of record must come back even when the run ends meanwhile.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := pg.Start(sctx); err != nil {
		return fmt.Errorf("restart postgres after its crash: %w", err)
	}
	r.labEvent(Event{Kind: EventHealed, Detail: fmt.Sprintf("postgres crashed (SIGKILL) and restarted in %.1fs (crash recovery done; pid %d, on %s)", time.Since(killed).Seconds(), pg.Pid(), pg.Addr())})
	return nil
}

// member is what killMember needs of an etcd cluster or a ZooKeeper
// ensemble.
type member interface {
	Leader(ctx context.Context) (*servers.Proc, error)
	Members() []*servers.Proc
}

// killMember kills a member of the lab's etcd cluster (its leader) or
// ZooKeeper ensemble (the member most sessions are on, the leader among
// equals) with SIGKILL, reports who leads once the others have elected,
// and restarts the member serverDowntime after the kill, or when the run
// ends if that is sooner.
func (r *Run) killMember(ctx context.Context, ch Chaos, k servers.Kind, begin func(error)) error {
	r.s.mu.Lock()
	var cluster member
	switch {
	case k == servers.KindEtcd && r.s.etcd != nil:
		cluster = r.s.etcd
	case k == servers.KindZooKeeper && r.s.zk != nil:
		cluster = r.s.zk
	}
	r.s.mu.Unlock()
	if cluster == nil {
		return fmt.Errorf("the lab has no %s of its own to kill", k)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leader, err := cluster.Leader(lctx)
	if err != nil {
		return err
	}
	victim, what := leader, fmt.Sprintf("%s leader %s (pid %d)", k, leader.Name(), leader.Pid())
	if k == servers.KindZooKeeper {
		var sessions, total int
		victim, sessions, total = busiestMember(lctx, cluster.Members(), leader)
		role := "follower"
		if victim == leader {
			role = "leader"
		}
		what = fmt.Sprintf("%s member %s (%s, %d of the ensemble's %d client sessions, pid %d)", k, victim.Name(), role, sessions, total, victim.Pid())
	}
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		return err
	}
	r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: %s killed with SIGKILL; it restarts in %s", ch, what, serverDowntime)})
	begin(nil)
	next, err := waitLeader(ctx, cluster)
	switch {
	case err != nil:
		r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: %s %s killed; no member leads %s later: %v", ch, k, victim.Name(), time.Since(killed).Round(time.Millisecond), err)})
	case victim == leader:
		r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: %s leader %s killed; %s leads, elected within %.1fs", ch, k, victim.Name(), next.Name(), time.Since(killed).Seconds())})
	default:
		r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: %s %s killed; %s still leads", ch, k, victim.Name(), next.Name())})
	}
	backoff.Sleep(ctx, time.Until(killed.Add(serverDowntime)))
	// The member must come back even when the run has ended meanwhile:
	// the session's next runs use the cluster.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := victim.Start(sctx); err != nil {
		return fmt.Errorf("restart %s: %w", victim.Name(), err)
	}
	r.labEvent(Event{Kind: EventHealed, Detail: fmt.Sprintf("%s restarted after %.1fs down and serves again (pid %d)", victim.Name(), time.Since(killed).Seconds(), victim.Pid())})
	return nil
}

// waitLeader waits, within 15 s, until a running member leads.
func waitLeader(ctx context.Context, cluster member) (*servers.Proc, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		m, err := cluster.Leader(pctx)
		pcancel()
		if err == nil {
			return m, nil
		}
		if !backoff.Sleep(ctx, 50*time.Millisecond) {
			return nil, err
		}
	}
}

// busiestMember returns the running ZooKeeper member with the most client
// sessions (its `cons` lines with a session id), preferring the leader
// among equals, with its sessions and those of every member. The nodes'
// clients each pick a member at random, so that is the member whose loss
// moves the most sessions; killing the leader also forces an election.
func busiestMember(ctx context.Context, members []*servers.Proc, leader *servers.Proc) (best *servers.Proc, most, total int) {
	best, most = leader, -1
	for _, m := range members {
		if !m.Running() {
			continue
		}
		out, err := servers.ZooKeeperCommand(ctx, m.Addr(), "cons")
		if err != nil {
			continue
		}
		n := strings.Count(out, "sid=")
		total += n
		if n > most || (n == most && m == leader) {
			best, most = m, n
		}
	}
	return best, max(most, 0), total
}

// catalogEdit is an edit of the run's catalog: from At on, the job fires
// every Every (0: unchanged), or not at all while paused; Added: the job
// was added to the catalog then, and fires from At on.
type catalogEdit struct {
	Job    string
	At     time.Time
	Every  time.Duration
	Paused *bool
	Added  bool
}

// edit applies an edit fault to the run's catalog, as an operator would
// (aegis schedule put/pause/resume): every node's binder picks it up.
func (r *Run) edit(ctx context.Context, ch Chaos) error {
	var (
		e   schedule.Entry
		err error
	)
	rec := catalogEdit{Job: ch.Target}
	if j, ok := ch.added(); ok {
		return r.addJob(ctx, ch, j)
	}
	switch ch.Spec {
	case "pause", "resume":
		paused := ch.Spec == "pause"
		rec.Paused = &paused
		if paused {
			e, err = r.catalog.Pause(ctx, ch.Target)
		} else {
			e, err = r.catalog.Resume(ctx, ch.Target)
		}
		rec.At = time.Now() // from the next tick claimed
	default:
		if e, err = r.catalog.Get(ctx, ch.Target); err == nil {
			e.Every, e.Cron = ch.Offset, ""
			e, err = r.catalog.Put(ctx, e)
		}
		rec.At, rec.Every = e.EffectiveAt, ch.Offset
	}
	if err != nil {
		return fmt.Errorf("edit %s: %w", ch.Target, err)
	}
	r.mu.Lock()
	r.edits = append(r.edits, rec)
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Job: ch.Target, Detail: fmt.Sprintf("%s: the catalog's %s is now %s%s, from %+.1fs (version %d)",
		ch, ch.Target, e.Spec(), map[bool]string{true: ", paused", false: ""}[e.Paused], r.secs(rec.At.UnixNano()), e.Version)})
	return nil
}

// addJob adds j to the run's catalog, as an operator would (aegis
// schedule put): its ledger row first, then its catalog row, which every
// node's binder picks up and runs from the row's effective time. From
// then on the lab expects its ticks, checks it and counts it.
func (r *Run) addJob(ctx context.Context, ch Chaos, j JobSpec) error {
	r.mu.Lock()
	exists := slices.ContainsFunc(r.jobs, func(x JobSpec) bool { return x.Name == j.Name })
	r.mu.Unlock()
	if exists {
		return fmt.Errorf("edit %s: the job is in the catalog already", ch.Target)
	}
	if _, err := r.db.ExecContext(ctx, insertLedgerSQL, r.ID, j.Name); err != nil {
		return fmt.Errorf("edit %s: its ledger: %w", ch.Target, err)
	}
	e, err := r.catalog.Put(ctx, j.entry(r.cfg))
	if err != nil {
		return fmt.Errorf("edit %s: %w", ch.Target, err)
	}
	r.mu.Lock()
	r.jobs = append(r.jobs, j)
	r.edits = append(r.edits, catalogEdit{Job: j.Name, At: e.EffectiveAt, Every: j.Every, Added: true})
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Job: j.Name, Detail: fmt.Sprintf("%s: %s added to the catalog, %s working %s%s, from %+.3fs (version %d)",
		ch, j.Name, e.Spec(), j.Work, map[bool]string{true: ", without keep-alive", false: ""}[j.NoKeepAlive], r.secs(e.EffectiveAt.UnixNano()), e.Version)})
	return nil
}
