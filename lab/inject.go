package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/aegislab/aegis/internal/backend"
	"github.com/aegislab/aegis/internal/servers"
)

// Inject applies a fault now, whatever its At: a pause or partition lasts
// its For, a kill restarts the node, a skew changes the node's clock from
// now on, a latency applies to the node's connections from now on. It
// returns once the fault has begun (for a holder target, once a node is in
// the critical section, or with an error if none enters before ctx ends);
// its end is reported as a healed event.
func (r *Run) Inject(ctx context.Context, ch Chaos) error {
	if err := r.cfg.checkChaos(r.strat, ch); err != nil && ch.Kind != Skew {
		return invalid("--chaos %s: %v", ch, err)
	}
	if err := r.s.checkDestructive(ch); err != nil {
		return err
	}
	if ch.Kind == Failover || ch.Kind == Restart {
		r.mu.Lock()
		reserved := slicesContainsRedisFault(r.cfg.Chaos)
		r.mu.Unlock()
		if !reserved {
			if err := r.s.holdRedis(); err != nil {
				return err
			}
			r.mu.Lock()
			r.cfg.Chaos = append(r.cfg.Chaos, ch) // so that the end releases Redis
			r.mu.Unlock()
		}
	}
	select {
	case <-r.done:
		return errors.New("the run has ended")
	default:
	}
	began := make(chan error, 1)
	r.chaos.Go(func() {
		if err := r.applyNotify(r.ctx, ch, began); err != nil {
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

func slicesContainsRedisFault(cs []Chaos) bool {
	for _, c := range cs {
		if c.Kind == Failover || c.Kind == Restart {
			return true
		}
	}
	return false
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
		sleep(ctx, ch.For) // a stopped run resumes at once
		r.mu.Lock()
		np.paused = false
		r.mu.Unlock()
		_, _ = r.signal(np, syscall.SIGCONT)
		r.labEvent(Event{Kind: EventHealed, Node: np.n, Detail: fmt.Sprintf("node%d resumed with SIGCONT", np.n)})
		return nil
	case Kill:
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
		r.eachProxy(np, func(p proxy) { p.Cut() })
		r.labEvent(Event{Kind: EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d cut from its servers for %s (connections dropped, new ones refused)%s", ch, np.n, ch.For, detail)})
		begin(nil)
		sleep(ctx, ch.For)
		r.eachProxy(np, func(p proxy) { p.Heal() })
		r.labEvent(Event{Kind: EventHealed, Node: np.n, Detail: fmt.Sprintf("node%d's partition healed", np.n)})
		return nil
	case Skew:
		np := r.node(ch.Node())
		r.mu.Lock()
		stdin := np.stdin
		np.cfg.Skew = ch.Offset
		r.mu.Unlock()
		b, _ := json.Marshal(controlLine{Skew: ptr(int64(ch.Offset))})
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("tell node%d its skew: %w", np.n, err)
		}
		r.labEvent(Event{Kind: EventChaos, Node: np.n, Detail: fmt.Sprintf("%s: node%d's clock is now %s off", ch, np.n, ch.Offset)})
		return nil
	case Latency:
		r.setLatency(ch)
		r.labEvent(Event{Kind: EventChaos, Detail: ch.String()})
		return nil
	case Failover:
		return r.failover(ctx, ch, begin)
	case Restart:
		return r.restartRedis(ctx, ch)
	}
	return fmt.Errorf("unknown fault %q", ch.Kind)
}

// controlLine is what the lab writes on a node's stdin after the start
// line: a change of its clock's skew (nanoseconds).
type controlLine struct {
	Skew *int64 `json:"skew,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func (r *Run) node(n int) *nodeProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[n-1]
}

// target returns the node a fault targets: nodeN, or for holder the node
// doing its work inside the critical section now (it has read, and not
// begun its write), or else the next one to enter it.
func (r *Run) target(ctx context.Context, ch Chaos) (*nodeProc, string, error) {
	if ch.Target != Holder {
		return r.node(ch.Node()), "", nil
	}
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
		return nil, "", errors.New("no node entered the critical section: nothing to target")
	}
	return r.node(e.Node), holderDetail(e.Job, e.Tick, e.Token), nil
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

func (r *Run) eachProxy(np *nodeProc, fn func(proxy)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range np.proxies {
		for _, p := range ps {
			fn(p)
		}
	}
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

// failover loses the primary before it replicates a grant: the
// replication link is cut, the next grant lands on the primary only, the
// primary is killed, the replica promoted, and every node's proxy switched
// to it.
func (r *Run) failover(ctx context.Context, ch Chaos, begin func(error)) error {
	r.s.mu.Lock()
	primary, replica, link := r.s.redis[0], r.s.replica, r.s.replLink
	r.s.mu.Unlock()
	link.Cut()
	r.mu.Lock()
	r.failedOver = true // from here on, the end of the run heals Redis
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: replication from the primary %s to its replica %s cut; waiting for the next grant", ch, primary.Addr(), replica.Addr())})
	begin(nil)
	e, err := r.waitEvent(ctx, func(e Event) bool { return e.Kind == EventAcquired })
	if err != nil {
		return errors.New("no grant after replication was cut: nothing to lose")
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
	r.labEvent(Event{Kind: EventChaos, Node: e.Node, Tick: e.Tick, Token: e.Token, Detail: fmt.Sprintf(
		"%s: primary %s killed right after it granted token %d to node%d, which its replica never received; replica %s promoted and the nodes switched to it",
		ch, primary.Addr(), e.Token, e.Node, replica.Addr())})
	return nil
}

// restartRedis restarts a Redis server of the strategy without
// persistence: it comes back empty, its token counters gone. For redis it
// is the single-node one (the first address); for redlock the first
// Redlock node (the second address: of six or more, the first is the
// single-node one).
func (r *Run) restartRedis(ctx context.Context, ch Chaos) error {
	r.s.mu.Lock()
	primary := r.s.redis[0]
	if r.strat.Name == "redlock" {
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
	r.s.mu.Unlock()
	if err := primary.Restart(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	r.labEvent(Event{Kind: EventChaos, Detail: fmt.Sprintf("%s: %s restarted without persistence: its keys and token counters are gone", ch, primary.Addr())})
	return nil
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
