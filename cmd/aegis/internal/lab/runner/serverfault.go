package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/natslease"
)

// failover loses the primary before it replicates a grant its holder
// works under: the replication link is cut, then the primary is killed
// as soon as a node granted the lease after the cut has read the ledger
// with that grant's token (it is inside the critical section, doing its
// work), the replica promoted, and every node's proxy switched to it. The
// promoted replica never saw that grant, so a successor can be granted the
// key while the holder still works.
func (r *Run) failover(ctx context.Context, ch lab.Chaos, begin func(error)) error {
	r.s.mu.Lock()
	primary, replica, link := r.s.redis[0], r.s.replica, r.s.replLink
	r.s.mu.Unlock()
	link.Cut()
	r.mu.Lock()
	r.failedOver = true // from here on, the end of the run heals Redis
	cut := len(r.events)
	r.mu.Unlock()
	r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: replication from the primary %s to its replica %s cut; waiting for a node granted the lease from now on to enter the critical section", ch, primary.Addr(), replica.Addr())})
	begin(nil)
	e, err := r.waitEvent(ctx, func(e lab.Event) bool {
		// r.mu is held by addLocked: the events since the cut are stable.
		if e.Kind != lab.EventEntered || e.Token == 0 || r.nodes[e.Node-1].paused {
			return false
		}
		for _, g := range r.events[cut:] {
			if g.Kind == lab.EventAcquired && g.Node == e.Node && g.Job == e.Job && g.Tick == e.Tick && g.Token == e.Token {
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
	r.labEvent(lab.Event{Kind: lab.EventChaos, Node: e.Node, Job: e.Job, Tick: e.Tick, Token: e.Token, Detail: fmt.Sprintf(
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
func (r *Run) restartRedis(ctx context.Context, ch lab.Chaos) error {
	// An empty Redis restarted shows nothing: the restart waits until a
	// node has worked under a lease (and, fenced, registered its token),
	// so that the counters it loses are ones a later grant repeats.
	entered := func(e lab.Event) bool { return e.Kind == lab.EventEntered && e.Node > 0 }
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
	if r.strat.Redis == lab.RedisQuorum {
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
	if ch.Target == lab.RedlockMajority {
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
	r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: %s restarted without persistence%s: their keys and token counters are gone", ch, strings.Join(names, ", "), waited)})
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
func (r *Run) crashPostgres(ctx context.Context, ch lab.Chaos, begin func(error)) error {
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
	r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: postgres (pid %d) killed with SIGKILL, its backends with it: every connection dropped; restarting it on the same port and data directory (crash recovery)", ch, pid)})
	begin(nil)
	// The store of record must come back even when the run ends meanwhile.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := pg.Start(sctx); err != nil {
		return fmt.Errorf("restart postgres after its crash: %w", err)
	}
	r.labEvent(lab.Event{Kind: lab.EventHealed, Detail: fmt.Sprintf("postgres crashed (SIGKILL) and restarted in %.1fs (crash recovery done; pid %d, on %s)", time.Since(killed).Seconds(), pg.Pid(), pg.Addr())})
	return nil
}

// promoteStandby fails the lab's PostgreSQL over to its hot standby, a
// planned switchover that loses no commit: the primary is stopped (fast
// shutdown: every connection drops, nothing uncommitted survives, and its
// WAL reaches the standby before it exits), the standby replays it to the
// primary's last record and is promoted, and every node's proxy that led
// to the primary leads to it from then on (the second region's already
// did). The old primary stays stopped: no node, and no connection of the
// lab's, can write to it again. The standby is the session's PostgreSQL
// and the store of record from then on, for this run's report and the
// session's later runs.
func (r *Run) promoteStandby(ctx context.Context, ch lab.Chaos, begin func(error)) error {
	r.mu.Lock()
	again := !r.promotedAt.IsZero()
	r.mu.Unlock()
	if again {
		return errors.New("the standby is promoted already: the run has no other")
	}
	r.s.mu.Lock()
	primary, standby := r.s.pg, r.s.standby
	r.s.mu.Unlock()
	if primary == nil || standby == nil {
		return errors.New("the lab has no hot standby of its own PostgreSQL to promote")
	}
	begun := time.Now()
	pid := primary.Pid()
	last, err := standby.Switchover(context.WithoutCancel(ctx), primary)
	if err != nil {
		if !primary.Running() {
			// The store of record must come back even when the switchover
			// failed: the old primary has every commit.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if serr := primary.Start(sctx); serr != nil {
				return fmt.Errorf("%w; and restarting the old primary: %v", err, serr)
			}
		}
		return err
	}
	r.s.promoted(primary)
	r.mu.Lock()
	for _, np := range r.nodes {
		for _, p := range np.proxies[servers.KindPostgres] {
			if p.Upstream() == primary.Addr() {
				p.SetUpstream(standby.Addr())
			}
		}
	}
	r.promotedAt = begun
	r.mu.Unlock()
	at := fmt.Sprintf("%s: promoted standby at %.3fs, the switchover begun at %.3fs", ch, r.secs(time.Now().UnixNano()), r.secs(begun.UnixNano()))
	r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf(
		"%s: the primary %s (pid %d) stopped (fast shutdown: every connection dropped, nothing uncommitted survived, and no node can write to it again); the standby %s replayed its WAL to its last record (%s) and was promoted: it is the store of record, and every node's store reaches it",
		at, primary.Addr(), pid, standby.Addr(), last)})
	// The summary shows it too: the report from here on is the new primary's.
	r.note("%s; the report is SQL over the promoted standby", at)
	begin(nil)
	return nil
}

// member is what killMember needs of an etcd cluster, a ZooKeeper
// ensemble or a NATS cluster.
type member interface {
	Leader(ctx context.Context) (*servers.Proc, error)
	Members() []*servers.Proc
}

// natsStream is a NATS cluster as kill:nats sees it: its leader is the
// leader of the nodes' lease bucket's stream (natslease's default bucket,
// which the nats backend opens), the server that decides every grant.
type natsStream struct{ *servers.NATS }

func (n natsStream) Leader(ctx context.Context) (*servers.Proc, error) {
	return n.StreamLeader(ctx, "KV_"+natslease.DefaultBucket)
}

// killMember kills a member of the lab's etcd cluster (its leader),
// ZooKeeper ensemble (the member most sessions are on, the leader among
// equals) or NATS cluster (the leader of the lease bucket's stream) with
// SIGKILL, reports who leads once the others have elected,
// and restarts the member serverDowntime after the kill, or when the run
// ends if that is sooner.
func (r *Run) killMember(ctx context.Context, ch lab.Chaos, k servers.Kind, begin func(error)) error {
	r.s.mu.Lock()
	var cluster member
	switch {
	case k == servers.KindEtcd && r.s.etcd != nil:
		cluster = r.s.etcd
	case k == servers.KindZooKeeper && r.s.zk != nil:
		cluster = r.s.zk
	case k == servers.KindNATS && r.s.nats != nil:
		cluster = natsStream{r.s.nats}
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
	if k == servers.KindNATS {
		what = fmt.Sprintf("nats leader %s of the lease bucket's stream (pid %d)", leader.Name(), leader.Pid())
	}
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
	r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: %s killed with SIGKILL; it restarts in %s", ch, what, lab.ServerDowntime)})
	begin(nil)
	next, err := waitLeader(ctx, cluster)
	switch {
	case err != nil:
		r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: %s %s killed; no member leads %s later: %v", ch, k, victim.Name(), time.Since(killed).Round(time.Millisecond), err)})
	case victim == leader:
		r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: %s leader %s killed; %s leads, elected within %.1fs", ch, k, victim.Name(), next.Name(), time.Since(killed).Seconds())})
	default:
		r.labEvent(lab.Event{Kind: lab.EventChaos, Detail: fmt.Sprintf("%s: %s %s killed; %s still leads", ch, k, victim.Name(), next.Name())})
	}
	backoff.Sleep(ctx, time.Until(killed.Add(lab.ServerDowntime)))
	// The member must come back even when the run has ended meanwhile:
	// the session's next runs use the cluster.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := victim.Start(sctx); err != nil {
		return fmt.Errorf("restart %s: %w", victim.Name(), err)
	}
	r.labEvent(lab.Event{Kind: lab.EventHealed, Detail: fmt.Sprintf("%s restarted after %.1fs down and serves again (pid %d)", victim.Name(), time.Since(killed).Seconds(), victim.Pid())})
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
