package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// The protocol between the lab and its nodes: the lab writes control
// lines on a node's standard input (pings once it is ready, then the
// start, then skews); the node writes one JSON event a line on its
// standard output.

// The events a node writes.
const (
	EvReady    = "ready"    // connected; waiting for the start time on stdin
	EvPong     = "pong"     // the answer to a ping (Ping: its number); the lab keeps no event of it
	EvAcquired = "acquired" // runs tick of job under token: the lease, claim or run is this node's
	EvRenewed  = "renewed"  // the keep-alive renewed a running tick's lease or run row (until: its new expiry)
	EvEnter    = "enter"    // about to read the job's ledger: the read's invocation (its at is the audit row's entered_ms)
	EvEntered  = "entered"  // read the ledger (value): in the critical section
	EvWriting  = "writing"  // the work is done; the write begins
	EvStale    = "stale"    // the fence refused the attempt (detail: read or write)
	EvExecuted = "executed" // committed ledger value and the EXECUTED row
	EvReleased = "released" // the run ended (the scheduler releases its lease or row)
	EvLost     = "lost"     // the scheduler saw the run's lease or row lost
	EvError    = "error"    // detail says what failed
	EvAbandon  = "abandoned"
	EvFinished = "finished" // the run's last window closed; the node exits
	EvReclaim  = "reclaim"  // this node's reaper took over a crashed run
	EvElected  = "elected"  // this node leads (leader mode)
	EvRefused  = "refused"  // the catalog refused a tick (paused, deleted or changed)
	EvMisfired = "misfired" // a tick missed its starting deadline, or its previous run still went (overlap forbid)
	EvClaimed  = "claimed"  // an optimistic claim moved the job's version to token (Since: when its statement began)
	// EvNotPrimary: the node's store is a hot standby: its scheduler runs
	// nothing (a second region).
	EvNotPrimary = "not-primary"
)

// NodeEvent is one line of a node's output.
type NodeEvent struct {
	Kind string `json:"kind"`
	At   int64  `json:"at"` // Unix nanoseconds, real clock (not skewed)
	Job  string `json:"job,omitempty"`
	Tick int    `json:"tick,omitempty"`
	// Token is the run's fencing token; RunAttempt its attempt (2 and up
	// for a reaper's retry).
	Token      int64 `json:"token,omitempty"`
	RunAttempt int   `json:"run_attempt,omitempty"`
	// Owner is a short one-way hash of the lease's owner (never the
	// owner): two holders granted one token differ in it.
	Owner   string `json:"owner,omitempty"`
	Attempt string `json:"attempt,omitempty"`
	Since   int64  `json:"since,omitempty"` // claimed: when the claim's statement began (Unix ns)
	Value   *int64 `json:"value,omitempty"`
	// Held: on stale, the token the store of record held when it refused.
	Held int64 `json:"held,omitempty"`
	// Until: on acquired and renewed, when the lease or claim expires on
	// the store unless renewed again (Unix ns, real clock).
	Until int64 `json:"until,omitempty"`
	// Granted: on acquired, when the store granted the lease or run row
	// (Unix ns, real clock): the store's grant history's time where it
	// keeps one (pg-lease, sqlite: GrantHistory), else the grant's call
	// start (Until minus the TTL). 0 where nothing expires on a store.
	// The line itself may come much later: a node paused between its
	// grant and its handler prints it when it resumes.
	Granted int64 `json:"granted,omitempty"`
	// Late: on misfired, how long after the tick's fire time the node saw
	// it could not start it (ns); 0 for a tick its own previous run held
	// up (overlap forbid).
	Late int64 `json:"late,omitempty"`
	// Stamp: on executed, the at_ms of the EXECUTED row that committed
	// (Unix ms, stamped in its write transaction); 0 when the node does not
	// know which of its tries landed (a retry found the row there).
	Stamp  int64  `json:"stamp,omitempty"`
	Ping   int64  `json:"ping,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// GrantHistory is how many grants of each key the nodes' row-lease
// stores (pg-lease, sqlite) keep in their grant history (Config.History):
// every grant of a run, whose nodes read back the store's time of their
// own.
const GrantHistory = 1000

// ControlLine is a line the lab writes on a node's standard input: before
// the start, a ping (the node answers with a pong event of the same
// number); then the start, when the run's first tick fires (Unix
// nanoseconds of the real clock); after it, a change of the node's clock's
// skew (nanoseconds).
type ControlLine struct {
	Ping  int64  `json:"ping,omitempty"`
	Start int64  `json:"start,omitempty"`
	Skew  *int64 `json:"skew,omitempty"`
}

// OwnerHash is what a node reports of a lease's owner: enough to tell two
// holders apart, nothing to act as one.
func OwnerHash(owner string) string {
	if owner == "" {
		return ""
	}
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:6])
}

// NodeConfig is what one node process of a run needs. The lab passes it
// as the flags of `aegis node` (see node.NodeMain); the lease servers'
// addresses come from the AEGIS_* variables of the node's environment,
// which point at the lab's proxies.
type NodeConfig struct {
	Run      string
	Node     int    // from 1
	Strategy string // a Strategies name
	Fence    bool
	Tick     time.Duration
	TTL      time.Duration
	Ticks    int
	// Window is how long after a tick fires its critical section may
	// still write: a write that keeps failing gives up then.
	Window time.Duration
	// Skew is the node's clock offset, applied to the scheduler's clock
	// (fire times) and to the optimistic claims.
	Skew time.Duration
	// Store is the store of record: a PostgreSQL URL, or sqlite:PATH.
	Store string
	// Incarnation tells a restarted node's attempts from its earlier
	// life's.
	Incarnation int
}

// NodeExitConfig is the exit status of a node that refused its
// configuration: its flags, or a value its backend refuses (aegis.ErrInvalid,
// such as an etcd TTL that is not whole seconds). The lab calls a run with
// such a node inconclusive.
const NodeExitConfig = 2

// ParseNodeArgs reads the flags of `aegis node`, the inverse of Args; a
// flag it cannot read is reported on stderr.
func ParseNodeArgs(args []string, stderr io.Writer) (NodeConfig, error) {
	fs := flag.NewFlagSet("aegis node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c NodeConfig
	fs.StringVar(&c.Run, "run", "", "the run's id")
	fs.IntVar(&c.Node, "node", 0, "this node's number, from 1")
	fs.StringVar(&c.Strategy, "strategy", "", "the strategy")
	fs.BoolVar(&c.Fence, "fence", true, "write through the fence")
	fs.DurationVar(&c.Tick, "tick", time.Second, "the tick interval")
	fs.DurationVar(&c.TTL, "ttl", 2*time.Second, "the lease TTL")
	fs.IntVar(&c.Ticks, "ticks", 0, "how many ticks")
	fs.DurationVar(&c.Window, "window", 0, "how long a tick's write may be retried")
	fs.DurationVar(&c.Skew, "skew", 0, "this node's clock offset")
	fs.StringVar(&c.Store, "store", "", "the store of record: a PostgreSQL URL or sqlite:PATH")
	fs.IntVar(&c.Incarnation, "incarnation", 1, "how many times this node was started")
	return c, fs.Parse(args)
}

// Args returns the flags of `aegis node` for c.
func (c NodeConfig) Args() []string {
	return []string{
		"--run", c.Run, fmt.Sprintf("--node=%d", c.Node), "--strategy", c.Strategy,
		fmt.Sprintf("--fence=%t", c.Fence), "--tick", c.Tick.String(),
		"--ttl", c.TTL.String(), fmt.Sprintf("--ticks=%d", c.Ticks), "--window", c.Window.String(),
		"--skew", c.Skew.String(), "--store", c.Store, fmt.Sprintf("--incarnation=%d", c.Incarnation),
	}
}

func (c NodeConfig) Validate() error {
	if _, ok := LookupStrategy(c.Strategy); !ok {
		return invalid("unknown strategy %q", c.Strategy)
	}
	switch {
	case c.Run == "":
		return invalid("--run is required")
	case c.Node < 1:
		return invalid("--node %d: must be at least 1", c.Node)
	case c.Tick <= 0 || c.TTL <= 0 || c.Window <= 0:
		return invalid("--tick, --ttl and --window must be positive")
	case c.Ticks < 1:
		return invalid("--ticks %d: must be at least 1", c.Ticks)
	case c.Store == "":
		return invalid("--store is required")
	}
	return nil
}

// Namespace is the run's catalog namespace: runs that share a store never
// see each other's schedules, runs or leases.
func Namespace(run string) string { return "lab-" + strings.ToLower(run) }
