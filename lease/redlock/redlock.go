// Package redlock is an aegis.Locker that runs the Redlock algorithm over N
// independent Redis primaries, with a fencing token.
//
// # How
//
// An attempt sends the single-node grant of lease/redislease (one Lua
// script: SET {prefix key} owner NX PX ttl, then INCR {prefix key}:fence)
// to every node at once, each bounded by Config.NodeTimeout. It succeeds
// when a majority (N/2+1) granted and time is left: validity = TTL −
// elapsed − drift, where drift is aegis.Drift(ttl) (1% + 2 ms) and elapsed
// runs from before the first request; the lease's Deadline is the end of
// that validity. Otherwise the attempt deletes its grants on every node
// (compare-and-delete) and fails: ErrHeld when some node had the key held
// by another owner, an error wrapping [ErrNoQuorum] when nodes failed or
// did not answer within the node timeout (naming each node, its address
// and its failure: "connection refused" for a node that is down), and one
// wrapping [ErrValidityExpired] when a majority granted but after the
// validity ran out. TryAcquire is one attempt; [aegis.Acquire] retries
// after random (jittered, growing) delays, which desynchronizes contenders
// as Redlock prescribes. Renew and Release run compare-and-PEXPIRE and
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
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/internal/reach"
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

// linger is how long a key's wake-up subscription outlives its last waiter.
const linger = 2 * time.Second

// Locker runs Redlock over its nodes. It is safe for concurrent use. Close
// waits for requests to slow nodes still running in the background; the
// clients stay the caller's.
type Locker struct {
	nodes       []redis.UniversalClient
	quorum      int
	prefix      string
	nodeTimeout time.Duration      // 0: timeout(ttl)
	hubs        []*redisnotify.Hub // a wake-up subscription per node; nil with NoWakeups
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

// TryAcquire makes one Redlock attempt (see the package doc): ErrHeld when
// another owner holds the key on enough nodes to deny a majority, an error
// wrapping ErrNoQuorum when nodes failed (naming each node and its
// failure), an error wrapping ErrValidityExpired when a majority granted
// but too late. A failed attempt leaves nothing held. One parallel round
// trip, two when the nodes' counters disagree.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := aegis.CheckKey(key); err != nil {
		return nil, err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return nil, err
	}
	lock := redisscript.LockFor(l.prefix, key)
	id := owner.New()
	start := time.Now()
	grants := l.each(ctx, l.timeout(ttl), func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		token, _, err := redisscript.Acquire(ctx, c, lock, id, ttl)
		return token, err
	})
	var (
		granted, held int
		token         int64
	)
	for _, g := range grants {
		switch {
		case g.err != nil:
		case g.v > 0:
			granted++
			token = max(token, g.v)
		default:
			held++
		}
	}
	err := l.tally(ctx, "acquire", lock, key, grants, granted, held)
	if err == nil {
		err = l.raise(ctx, key, ttl, lock, grants, token)
	}
	if err == nil {
		err = l.valid("acquire", key, start, ttl)
	}
	if err != nil {
		l.undo(ctx, ttl, lock, id, grants)
		return nil, err
	}
	return &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(token),
		Owner:    redisscript.Owner(id, token),
		TTL:      ttl,
		Deadline: aegis.LocalDeadline(start, ttl),
	}, nil
}

// ErrValidityExpired is wrapped by the error of an attempt or renewal
// whose majority answered, but after the lease's validity (TTL − drift
// from the start of the call) had run out: the nodes are slow, or the TTL
// is too short for them.
var ErrValidityExpired = errors.New("redlock: the lease's validity ran out before a majority answered")

// valid fails a call started at start whose validity has run out.
func (l *Locker) valid(op, key string, start time.Time, ttl time.Duration) error {
	if elapsed := time.Since(start); elapsed >= ttl-aegis.Drift(ttl) {
		return fmt.Errorf("redlock: %s %q: %w: a majority answered after %s, and a %s lease is valid for %s (the TTL less %s of drift)",
			op, key, ErrValidityExpired, elapsed.Round(time.Microsecond), ttl, ttl-aegis.Drift(ttl), aegis.Drift(ttl))
	}
	return nil
}

// raise brings every granting node whose counter is below token up to it,
// so that the next majority, which overlaps this one, counts past token.
func (l *Locker) raise(ctx context.Context, key string, ttl time.Duration, lock redisscript.Lock, grants []reply, token int64) error {
	lagging := make([]bool, len(grants))
	var any bool
	for i, g := range grants {
		if g.err == nil && g.v > 0 && g.v < token {
			lagging[i], any = true, true
		}
	}
	if !any {
		return nil
	}
	raised := l.eachOf(ctx, l.timeout(ttl), lagging, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return redisscript.Raise(ctx, c, lock, token)
	})
	for i, r := range raised {
		if lagging[i] && (r.err != nil || r.v < token) {
			cause := r.err
			if cause == nil {
				cause = errors.New("its counter stayed below the token")
			} else {
				cause = redisscript.Translate("raise", lock, key, cause)
			}
			return fmt.Errorf("redlock: acquire %q: raising %s's counter to the token: %w: %w", key, l.name(i), ErrNoQuorum, cause)
		}
	}
	return nil
}

// undo deletes a failed attempt's grants on every node that may hold one
// (granted, or failed: its script may have run), even when ctx ended.
func (l *Locker) undo(ctx context.Context, ttl time.Duration, lock redisscript.Lock, id string, grants []reply) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	which := make([]bool, len(grants))
	for i, g := range grants {
		which[i] = g.err != nil || g.v > 0
	}
	l.eachOf(ctx, l.timeout(ttl), which, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		out, err := redisscript.Release(ctx, c, lock, id, 0)
		return int64(out), err
	})
}

// Renew extends lease on every node that still holds it; it succeeds when
// a majority did within the lease's validity. Otherwise it returns an
// error wrapping ErrLost when some node no longer holds the lease (work
// under it must stop; the error says what each node found), one wrapping
// ErrValidityExpired when the majority answered too late, and one
// wrapping ErrNoQuorum when nodes failed and none said the lease is lost.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := aegis.CheckTTL(ttl, 0); err != nil {
		return err
	}
	value, ok := redisscript.Value(lease)
	if !ok {
		return forged("renew", lease.Key)
	}
	lock := redisscript.LockFor(l.prefix, lease.Key)
	start := time.Now()
	rs := l.each(ctx, l.timeout(ttl), func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		out, err := redisscript.Renew(ctx, c, lock, value, int64(lease.Token), ttl)
		return int64(out), err
	})
	if err := l.settle(ctx, "renew", lock, lease.Key, rs); err != nil {
		return err
	}
	if err := l.valid("renew", lease.Key, start, ttl); err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = aegis.LocalDeadline(start, ttl)
	return nil
}

// Release deletes lease on every node that still holds it. It succeeds
// when a majority did. Otherwise it returns an error wrapping ErrLost when
// some node no longer held the lease (what was deleted are this lease's
// own leftovers on a minority), and one wrapping ErrNoQuorum when nodes
// failed and none said so.
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	value, ok := redisscript.Value(lease)
	if !ok {
		return forged("release", lease.Key)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: release %q: %w", lease.Key, err)
	}
	lock := redisscript.LockFor(l.prefix, lease.Key)
	rs := l.each(ctx, l.timeout(lease.TTL), func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		out, err := redisscript.Release(ctx, c, lock, value, int64(lease.Token))
		return int64(out), err
	})
	return l.settle(ctx, "release", lock, lease.Key, rs)
}

// forged is the ErrLost of a lease whose Owner does not carry its token:
// it was altered, or made by another backend; no request is sent.
func forged(op, key string) error {
	return fmt.Errorf("redlock: %s %q: %w: the lease's owner does not match its token (an altered or foreign lease)", op, key, aegis.ErrLost)
}

// settle decides a renew or release from the nodes' replies (Done, or
// Gone and Taken: not held).
func (l *Locker) settle(ctx context.Context, op string, lock redisscript.Lock, key string, rs []reply) error {
	var yes, no int
	for _, r := range rs {
		switch {
		case r.err != nil:
		case redisscript.Outcome(r.v) == redisscript.Done:
			yes++
		default:
			no++
		}
	}
	return l.tally(ctx, op, lock, key, rs, yes, no)
}

// tally returns nil when yes reaches the quorum; otherwise a refusal when
// some node said no (ErrHeld for acquire, so that a contender retries;
// ErrLost for renew and release, so that a holder stops even with a node
// down); otherwise an error wrapping ErrNoQuorum that names the nodes'
// failures. The end of ctx wins over both.
func (l *Locker) tally(ctx context.Context, op string, lock redisscript.Lock, key string, rs []reply, yes, no int) error {
	if yes >= l.quorum {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: %s %q: %w", op, key, err)
	}
	if no > 0 && op == "acquire" {
		return aegis.ErrHeld
	}
	l.diagnose(ctx, rs)
	var why []string
	var errs []error
	for i, r := range rs {
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", l.name(i), redisscript.Translate(op, lock, key, r.err)))
		case op != "acquire" && redisscript.Outcome(r.v) != redisscript.Done:
			why = append(why, fmt.Sprintf("%s: %s", l.name(i), redisscript.Outcome(r.v).Reason()))
		}
	}
	if no > 0 {
		for _, err := range errs {
			why = append(why, err.Error())
		}
		return fmt.Errorf("redlock: %s %q: %w: %d of %d nodes hold the lease, %d needed (%s)",
			op, key, aegis.ErrLost, yes, len(rs), l.quorum, strings.Join(why, "; "))
	}
	return fmt.Errorf("redlock: %s %q: %d of %d nodes agreed, %d needed: %w: %w",
		op, key, yes, len(rs), l.quorum, ErrNoQuorum, errors.Join(errs...))
}

// name names node i in errors: its index and, when its client says, its
// address.
func (l *Locker) name(i int) string {
	if a := addrOf(l.nodes[i]); a != "" {
		_, a, _ = strings.Cut(a, " ")
		return fmt.Sprintf("node %d (%s)", i, a)
	}
	return fmt.Sprintf("node %d", i)
}

// reply is one node's answer to one operation.
type reply struct {
	v   int64
	err error
}

// each runs f on every node at once and returns their replies, in node
// order; a node that does not answer within timeout gets a timeout error.
// It returns early when ctx ends.
func (l *Locker) each(ctx context.Context, timeout time.Duration, f func(context.Context, redis.UniversalClient) (int64, error)) []reply {
	return l.eachOf(ctx, timeout, nil, f)
}

// eachOf is each on the nodes i with which[i] (all when which is nil).
func (l *Locker) eachOf(ctx context.Context, timeout time.Duration, which []bool, f func(context.Context, redis.UniversalClient) (int64, error)) []reply {
	type answer struct {
		i int
		reply
	}
	rs := make([]reply, len(l.nodes))
	answers := make(chan answer, len(l.nodes))
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := 0
	for i, c := range l.nodes {
		if which != nil && !which[i] {
			continue
		}
		pending++
		rs[i].err = errNoAnswer
		l.calls.Go(func() {
			v, err := f(nctx, c)
			answers <- answer{i, reply{v: v, err: err}}
		})
	}
wait:
	for ; pending > 0; pending-- {
		select {
		case a := <-answers:
			rs[a.i] = a.reply
		case <-nctx.Done():
			break wait
		}
	}
	// A node that timed out did not answer; its context error is not the
	// caller's (tally reports the caller's own end separately).
	for i := range rs {
		if errors.Is(rs[i].err, errNoAnswer) || errors.Is(rs[i].err, context.DeadlineExceeded) && ctx.Err() == nil {
			rs[i].err = &noAnswer{within: timeout}
		}
	}
	return rs
}

// dial connects to node i's address, bounded by timeout, and returns the
// error when it cannot (refused, unreachable); nil when it can, or when
// the client does not say its address.
func (l *Locker) dial(ctx context.Context, i int, timeout time.Duration) error {
	a := addrOf(l.nodes[i])
	if a == "" || ctx.Err() != nil {
		return nil
	}
	network, address, _ := strings.Cut(a, " ")
	return reach.Dial(ctx, network, address, timeout)
}

var errNoAnswer = errors.New("no answer")

// noAnswer is the error of a node that did not answer in time, with the
// reason found by dialling it, if any.
type noAnswer struct {
	within time.Duration
	dial   error
}

func (e *noAnswer) Error() string {
	if e.dial != nil {
		return fmt.Sprintf("no answer within %s: %v", e.within, e.dial)
	}
	return fmt.Sprintf("no answer within %s", e.within)
}

func (e *noAnswer) Unwrap() []error { return []error{errNoAnswer, e.dial} }

// diagnose dials the nodes that did not answer, at once: go-redis hides
// why (it retries a refused dial until the context ends), and "connection
// refused" says more than a timeout. It runs only when a call fails.
func (l *Locker) diagnose(ctx context.Context, rs []reply) {
	var wg sync.WaitGroup
	for i := range rs {
		if e, ok := rs[i].err.(*noAnswer); ok {
			wg.Go(func() { e.dial = l.dial(ctx, i, e.within) })
		}
	}
	wg.Wait()
}

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

// Notify implements aegis.Notifier: the channel receives a value when key
// is released through any Locker with the same prefix on any of the
// nodes (every release publishes on each node it frees). It subscribes on
// every node at once and returns when a quorum has confirmed, or when every
// node has answered: a minority of nodes that are down or slow costs no
// wake-up, since a release frees the key on a majority. It fails only when
// no node subscribes, with each node's reason (a refused SUBSCRIBE is an
// error that says which permission is missing). With Config.NoWakeups it
// returns a nil channel, which never fires: the waiter polls.
//
// Without wake-ups a waiter's poll must land in the gap between a greedy
// holder's release and its next grant, and starves; with them it races
// the holder on equal terms.
func (l *Locker) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := aegis.CheckKey(key); err != nil {
		return nil, nil, err
	}
	if l.hubs == nil {
		return nil, func() {}, nil
	}
	channel := redisscript.LockFor(l.prefix, key).Channel()
	type sub struct {
		i    int
		ch   <-chan struct{}
		stop func()
		err  error
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan sub, len(l.hubs))
	for i, h := range l.hubs {
		go func() {
			ch, stop, err := h.Notify(sctx, channel)
			results <- sub{i, ch, stop, err}
		}()
	}
	var subs []sub
	var errs []error
	for range l.hubs {
		r := <-results // each ends at its confirmation, its refusal or sctx's end
		if r.err != nil {
			if ctx.Err() == nil && !errors.Is(r.err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", l.name(r.i), r.err))
			}
			continue
		}
		if subs = append(subs, r); len(subs) == l.quorum {
			cancel() // enough: the others give up their wait
		}
	}
	if err := ctx.Err(); err != nil {
		for _, s := range subs {
			s.stop()
		}
		return nil, nil, fmt.Errorf("redlock: notify %q: %w", key, err)
	}
	if len(subs) == 0 {
		return nil, nil, fmt.Errorf("redlock: notify %q: no node subscribed: %w", key, errors.Join(errs...))
	}
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	var forward sync.WaitGroup
	for _, s := range subs {
		forward.Go(func() {
			for {
				select {
				case _, ok := <-s.ch:
					if !ok {
						return
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				case <-done:
					return
				}
			}
		})
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			forward.Wait()
			for _, s := range subs {
				s.stop()
			}
		})
	}
	return wake, stop, nil
}
