// Package redlock is an aegis.Locker that runs the Redlock algorithm over N
// independent Redis primaries, with a fencing token.
//
// # How
//
// An attempt sends the single-node grant of lease/redislease (one Lua
// script: SET {prefix key} owner NX PX ttl, then INCR {prefix key}:fence)
// to every node at once, each bounded by Config.NodeTimeout. It succeeds
// when a majority (N/2+1) granted and time is left: validity = TTL −
// elapsed − drift, where drift is driver.Drift(ttl) (1% + 2 ms) and elapsed
// runs from before the first request; the lease's Deadline is the end of
// that validity. Otherwise the attempt deletes its grants on every node
// (compare-and-delete) and fails: ErrHeld when some node had the key held
// by another owner, an error wrapping [ErrNoQuorum] when nodes failed or
// did not answer within the node timeout (naming each node, its address
// and its failure: "connection refused" for a node that is down), and one
// wrapping [ErrValidityExpired] when a majority granted but after the
// validity ran out. The scripts of concurrent calls of one Locker to one
// node go together in one pipeline, as in lease/redislease (each is still
// atomic, each call still one round trip). TryAcquire is one attempt;
// [aegis.Acquire] retries after random (jittered, growing) delays, which
// desynchronizes contenders as Redlock prescribes. Renew and Release run compare-and-PEXPIRE and
// compare-and-delete on every node; Renew succeeds when a majority
// extended the lease within its validity. A lost lease is an error
// wrapping aegis.ErrLost that says, node by node, whether another owner
// holds the key or it is gone, never the owner value.
//
// New refuses what would make the majority a fiction, with an error
// wrapping aegis.ErrInvalid: fewer than [MinNodes] nodes, the same client
// twice, or two clients with the same Options().Addr (it cannot see two
// names for one server, such as localhost and 127.0.0.1). It also refuses
// a node whose maxmemory-policy can evict the token counters, as
// lease/redislease does (see its doc), unless Config.SkipPolicyCheck.
//
// The token is the greatest of the counters of the nodes that granted.
// Counters of different nodes drift apart (a failed attempt increments a
// minority; a node restarts), so a later majority could otherwise produce a
// smaller token than an earlier one. Before returning a lease, the attempt
// therefore raises every granting node whose counter is below the token to
// the token (a second round trip, only when the counters disagree). Any
// later majority overlaps this one in a node whose grant came after ours
// was deleted or expired, so its counter, and the next token, is greater.
// Nodes hold different counters, so they compare only the owner value on
// renew and release; the token is bound to the lease on the client side
// (Lease.Owner carries it), and a lease whose token was altered is refused
// (ErrLost) without a request.
//
// # What it is not
//
// Redlock is not a consensus system. Martin Kleppmann's critique ("How to
// do distributed locking", 2016): its safety rests on timing assumptions
// (bounded network delay, bounded process pauses, clocks that run at about
// the same rate and never jump); a GC pause or a clock step after the
// majority answered leaves a client that believes it holds the lock after
// it expired on the nodes, and Redlock issues no fencing token to catch
// that. Salvatore Sanfilippo (antirez)'s reply ("Is Redlock safe?"): the
// algorithm only assumes clocks that advance at about the same rate, which
// the drift term covers; pauses hurt every lease-based lock and are partly
// caught by checking the time left after acquiring; and a store able to
// check a token could as well check the random owner value. Whichever side
// one takes, the rule here is the same: the data is protected by a
// monotonic token that the store of record checks (package fence); Redlock
// by itself only reduces how often two holders run.
//
// What the token does not promise: it increases only while the nodes keep
// their counters. A node restarted without persistence comes back empty;
// if a majority does (Redis with "save" off, or AOF without fsync always,
// after a crash), a second client is granted the key while the first still
// holds it, and its token comes from the restarted counters: lower than
// the first holder's, or equal to it (TestMajorityRestartTwoHolders: the
// first holds token 4, the second gets token 1).
// The counters of different majorities then disagree until a grant raises
// them. A minority restart keeps the lease and the order
// (TestMinorityRestartKeepsOrder). Clock jumps on a node (an NTP step)
// expire its keys early or late; pauses of the holder are the fence's job.
//
// Use it to save duplicate work across Redis node failures; protect data
// with the fence, and prefer a consensus store (etcd, ZooKeeper) or
// PostgreSQL when correctness must survive node restarts.
//
// On each node a counter deleted or evicted while a lease is held is
// restored to the lease's token by its renew or release, as in
// lease/redislease; one lost while the key is free is not detected.
//
// A waiter in aegis.Acquire is woken by releases: Notify subscribes to the
// key's release channel on every node (a quorum confirming is enough), so
// it races a holder that releases and at once asks again on equal terms
// instead of starving behind it. Close ends the subscriptions.
//
// Each node needs the same least-privilege ACL as lease/redislease (its
// ACLRules, which include the key's channel; Redlock sends no WAIT), and
// the same Config.SkipPolicyCheck to keep New's CONFIG GET out of ACL LOG;
// a user without +subscribe sets Config.NoWakeups and polls.
package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/redisnotify"
	"github.com/aegislab/aegis/internal/redisscript"
)

var _ aegis.Locker = (*Locker)(nil)

// ErrNoQuorum is wrapped by the errors of calls that failed because too
// few nodes answered in time, with no node reporting the key held (or,
// for renew and release, lost). The error names each node and its failure.
var ErrNoQuorum = errors.New("redlock: no quorum of nodes answered")

// cleanupTimeout bounds the deletion of a failed attempt's grants, which
// runs even when the caller's context ended.
const cleanupTimeout = 5 * time.Second

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Prefix is put before every key, inside the hash tag, as in
	// lease/redislease. Default "aegis:".
	Prefix string
	// NodeTimeout bounds each request to one node; a node that answers
	// later counts as failed for that call. Keep it well under the TTLs you
	// use: validity shrinks by the time the slowest needed node takes.
	// Default: 5% of the call's TTL (the lease's TTL for Release), between
	// 10ms and 1s.
	NodeTimeout time.Duration
	// SkipPolicyCheck makes New not ask the nodes for their
	// maxmemory-policy, as in lease/redislease: without it New refuses a
	// node whose policy can evict the token counters (allkeys-*). Default
	// false.
	SkipPolicyCheck bool
	// NoWakeups makes the Locker's waiters poll (aegis.Acquire's jittered
	// backoff) instead of subscribing to releases on the nodes: for a
	// Redis user without +subscribe. Notify then returns a channel that
	// never fires. Default false: wake-ups, and a user without the
	// permission gets an error that says so.
	NoWakeups bool
}

// Locker runs Redlock over its nodes. It is safe for concurrent use. Close
// waits for requests to slow nodes still running in the background; the
// clients stay the caller's.
type Locker struct {
	nodes       []redis.UniversalClient
	quorum      int
	prefix      string
	nodeTimeout time.Duration      // 0: timeout(ttl)
	hubs        []*redisnotify.Hub // a wake-up subscription per node; nil with NoWakeups
	// coalescers send the scripts of concurrent operations to a node in
	// one pipeline, as lease/redislease does for its one server.
	coalescers []*redisscript.Coalescer
	// calls owns the per-node requests: an operation stops waiting for a
	// node after NodeTimeout (go-redis honours context deadlines only with
	// ContextTimeoutEnabled), and Close waits for those left running.
	calls sync.WaitGroup
}

// MinNodes is the fewest nodes New accepts: with one or two, the quorum is
// every node, so Redlock would survive no node failure and be a slower
// lease/redislease.
const MinNodes = 3

// New returns a Locker over nodes, independent Redis primaries (not
// replicas of one another, not one Cluster). Five is the usual count; the quorum is len(nodes)/2+1. A nil cfg means defaults.
// Bad input is an error wrapping aegis.ErrInvalid: no nodes, fewer than
// MinNodes, a nil node, the same client twice, two clients that dial the
// same address (Options().Addr; one Redis would count twice toward the
// quorum), or a bad Config field.
//
// New asks each node for its maxmemory-policy, as lease/redislease does,
// and refuses a policy that can evict the token counters unless
// Config.SkipPolicyCheck is set; nodes that do not answer within a second,
// or refuse CONFIG GET, are not checked.
func New(nodes []redis.UniversalClient, cfg *Config) (*Locker, error) {
	if err := checkNodes(nodes); err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = cmp.Or(c.Prefix, redisscript.DefaultPrefix)
	if err := redisscript.CheckPrefix("Config.Prefix", c.Prefix); err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	if c.NodeTimeout < 0 {
		return nil, fmt.Errorf("redlock: %w: Config.NodeTimeout %s is negative", aegis.ErrInvalid, c.NodeTimeout)
	}
	l := &Locker{
		nodes:       append([]redis.UniversalClient(nil), nodes...),
		quorum:      len(nodes)/2 + 1,
		prefix:      c.Prefix,
		nodeTimeout: c.NodeTimeout,
	}
	for _, n := range l.nodes {
		l.coalescers = append(l.coalescers, redisscript.NewCoalescer(n))
	}
	if !c.NoWakeups {
		for _, n := range l.nodes {
			l.hubs = append(l.hubs, redisnotify.New(func() *redis.PubSub {
				return n.Subscribe(context.Background())
			}, linger))
		}
	}
	if !c.SkipPolicyCheck {
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), redisscript.CheckTimeout)
		for i, n := range l.nodes {
			wg.Go(func() { errs[i] = redisscript.CheckEviction(ctx, n, fmt.Sprintf("node %d: ", i)) })
		}
		wg.Wait()
		cancel()
		if err := errors.Join(errs...); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("redlock: %w", err)
		}
	}
	return l, nil
}

// checkNodes refuses node lists that cannot make an independent majority.
func checkNodes(nodes []redis.UniversalClient) error {
	if len(nodes) == 0 {
		return fmt.Errorf("%w: no nodes", aegis.ErrInvalid)
	}
	clients := make(map[any]int)
	addrs := make(map[string]int)
	for i, n := range nodes {
		if n == nil {
			return fmt.Errorf("%w: node %d is nil", aegis.ErrInvalid, i)
		}
		if v := reflect.ValueOf(n); v.Kind() == reflect.Pointer && v.IsNil() {
			return fmt.Errorf("%w: node %d is a nil %T", aegis.ErrInvalid, i, n)
		}
		if reflect.TypeOf(n).Comparable() {
			if j, ok := clients[n]; ok {
				return fmt.Errorf("%w: nodes %d and %d are the same client: one Redis would count twice toward the quorum", aegis.ErrInvalid, j, i)
			}
			clients[n] = i
		}
		if a := addrOf(n); a != "" {
			if j, ok := addrs[a]; ok {
				return fmt.Errorf("%w: nodes %d and %d both dial %s: one Redis would count twice toward the quorum", aegis.ErrInvalid, j, i, a)
			}
			addrs[a] = i
		}
	}
	if len(nodes) < MinNodes {
		return fmt.Errorf("%w: %d nodes; Redlock needs at least %d independent primaries (with fewer, the quorum is every node and one failure stops it): use lease/redislease for one Redis", aegis.ErrInvalid, len(nodes), MinNodes)
	}
	return nil
}

// addrOf is the network and address a node's client dials ("" when its
// type does not say, as for a Cluster or Ring).
func addrOf(n redis.UniversalClient) string {
	o, ok := n.(interface{ Options() *redis.Options })
	if !ok {
		return ""
	}
	opt := o.Options()
	if opt.Addr == "" {
		return ""
	}
	return cmp.Or(opt.Network, "tcp") + " " + opt.Addr
}

// timeout is the per-node timeout of a call with ttl.
func (l *Locker) timeout(ttl time.Duration) time.Duration {
	if l.nodeTimeout > 0 {
		return l.nodeTimeout
	}
	return min(max(ttl/20, 10*time.Millisecond), time.Second)
}

// Quorum is the number of nodes that must agree: len(nodes)/2+1.
func (l *Locker) Quorum() int { return l.quorum }

// Close waits for requests to slow nodes that operations stopped waiting
// for (each ends within the client's read timeout). It does not close the
// clients. The Locker must not be used after Close.
func (l *Locker) Close() error {
	l.calls.Wait()
	var errs []error
	for _, h := range l.hubs {
		errs = append(errs, h.Close())
	}
	return errors.Join(errs...)
}
