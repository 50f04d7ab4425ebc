package lab

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// ChaosKind names a kind of fault.
type ChaosKind string

// The kinds of fault, with their spec forms (docs/design.md section 8).
const (
	Pause     ChaosKind = "pause"     // pause:TARGET@AT+FOR — SIGSTOP, SIGCONT after FOR
	Kill      ChaosKind = "kill"      // kill:TARGET@AT — SIGKILL, then a restart; kill:etcd@AT, kill:zookeeper@AT, kill:nats@AT — a member
	Failover  ChaosKind = "failover"  // failover:redis@AT — primary lost before replication, replica promoted
	Restart   ChaosKind = "restart"   // restart:redis@AT — restarted without persistence; restart:redlock@AT — a majority of Redlock's
	Crash     ChaosKind = "crash"     // crash:postgres@AT — SIGKILL, then a restart with crash recovery
	Partition ChaosKind = "partition" // partition:TARGET@AT+FOR[/SERVER] — the node's connections (to SERVER) dropped
	Skew      ChaosKind = "skew"      // skew:nodeN=±D — the node's clock offset
	Latency   ChaosKind = "latency"   // latency:SERVER=D — every round trip to SERVER takes D longer
	Edit      ChaosKind = "edit"      // edit:JOB@AT=SPEC — a catalog edit: a new cadence, pause or resume
	Promote   ChaosKind = "promote"   // promote:standby@AT — the primary stopped, its hot standby promoted, the nodes moved to it
)

// The node targets that are not a fixed node.
const (
	// Holder targets the node inside the critical section at that moment
	// (it has read and not begun its write), or else the next node to
	// enter it.
	Holder = "holder"
	// Writer targets the node inside its write to the store at that
	// moment (between its writing event and its outcome), or else the
	// next node to begin one.
	Writer = "writer"
	// Committer targets the next node to commit a tick, right after it
	// reports its commit: its run succeeded, and its scheduler may not
	// have recorded the run's end yet. A kill of it is the restart of a
	// replica whose tick must not run again.
	Committer = "committer"
	// Leader targets the node that leads (leader mode: the last elected,
	// still in the process it was elected in), or else the next one
	// elected.
	Leader = "leader"
)

// movingTarget reports whether target names a node by what it is doing
// (holder, writer, committer, leader), not by its number.
func movingTarget(target string) bool {
	return target == Holder || target == Writer || target == Committer || target == Leader
}

// Standby is the target of promote:standby@AT: the lab's hot standby of
// its PostgreSQL (Config.Standby), promoted to be the store of record.
const Standby = "standby"

// RedlockMajority is the target of restart:redlock@AT: a majority of the
// Redlock nodes restarted at once without persistence.
const RedlockMajority = "redlock"

// ServerDowntime is how long kill:etcd, kill:zookeeper and kill:nats keep the killed
// member down before the lab restarts it (sooner when the run ends
// first): long enough for the others to elect a leader and the nodes'
// clients to move, short enough to see the member rejoin within a run.
const ServerDowntime = 2 * time.Second

// killable are the servers kill:SERVER@AT kills a member of.
var killable = []servers.Kind{servers.KindEtcd, servers.KindZooKeeper, servers.KindNATS}

// Chaos is one fault of a run. Parse it from its spec with [ParseChaos].
type Chaos struct {
	Kind ChaosKind
	// Target is "holder", "writer", "committer", "leader" or "nodeN" for
	// pause, kill and partition; "nodeN" for skew; "etcd", "zookeeper" or
	// "nats" for a kill of a server member; "redis" for failover and
	// restart; "postgres" for crash; "standby" for promote; a server kind
	// (postgres, redis, etcd, zookeeper, nats) for latency.
	Target string
	// At is when the fault happens, from the start of the run's first
	// tick. Zero for skew and latency, which last the whole run.
	At time.Duration
	// For is how long a pause or a partition lasts.
	For time.Duration
	// Offset is the clock offset of skew (positive: the node's clock is
	// ahead) or the added delay of latency.
	Offset time.Duration
	// Server is the one server kind a partition cuts the node from
	// (postgres, redis, etcd, zookeeper, nats); "" cuts it from every
	// server.
	Server string
	// Spec is an edit's: "pause", "resume", the job's new cadence (a
	// duration, in Offset too), or for a job not in the catalog the
	// schedule to add, EVERY/WORK[/no-keep-alive] (a --catalog row after
	// its "=").
	Spec string
}

// Added returns the schedule an edit adds to the run's catalog: its Spec
// is a --catalog row's EVERY/WORK.
func (c Chaos) Added() (JobSpec, bool) {
	if c.Kind != Edit || !strings.Contains(c.Spec, "/") {
		return JobSpec{}, false
	}
	jobs, err := ParseCatalog(c.Target + "=" + c.Spec)
	if err != nil || len(jobs) != 1 {
		return JobSpec{}, false
	}
	return jobs[0], true
}

// Node returns N for a target "nodeN", and 0 for any other target.
func (c Chaos) Node() int {
	n, ok := parseNode(c.Target)
	if !ok {
		return 0
	}
	return n
}

// ServerKind returns the server the fault kills, restarts or fails over: the
// lab's own, shared by every run of its session.
func (c Chaos) ServerKind() (servers.Kind, bool) {
	switch {
	case c.Kind == Failover || c.Kind == Restart:
		return servers.KindRedis, true
	case c.Kind == Crash || c.Kind == Promote:
		return servers.KindPostgres, true
	case c.Kind == Kill && slices.Contains(killable, servers.Kind(c.Target)):
		return servers.Kind(c.Target), true
	}
	return "", false
}

// String returns the chaos in its canonical spec form, which ParseChaos
// accepts.
func (c Chaos) String() string {
	switch c.Kind {
	case Pause:
		return fmt.Sprintf("%s:%s@%s+%s", c.Kind, c.Target, c.At, c.For)
	case Partition:
		s := fmt.Sprintf("%s:%s@%s+%s", c.Kind, c.Target, c.At, c.For)
		if c.Server != "" {
			s += "/" + c.Server
		}
		return s
	case Kill, Failover, Restart, Crash, Promote:
		return fmt.Sprintf("%s:%s@%s", c.Kind, c.Target, c.At)
	case Skew:
		sign := "+"
		if c.Offset < 0 {
			sign = ""
		}
		return fmt.Sprintf("%s:%s=%s%s", c.Kind, c.Target, sign, c.Offset)
	case Latency:
		return fmt.Sprintf("%s:%s=%s", c.Kind, c.Target, c.Offset)
	case Edit:
		return fmt.Sprintf("%s:%s@%s=%s", c.Kind, c.Target, c.At, c.Spec)
	}
	return string(c.Kind) + ":" + c.Target
}

// maxChaosDuration bounds every duration in a spec: longer is a typo.
const maxChaosDuration = 24 * time.Hour

// ParseChaos parses a chaos spec:
//
//	pause:TARGET@AT+FOR   kill:TARGET@AT        failover:redis@AT
//	restart:redis@AT      partition:TARGET@AT+FOR[/SERVER]
//	skew:nodeN=±D         latency:SERVER=D      crash:postgres@AT
//	kill:etcd@AT          kill:zookeeper@AT     kill:nats@AT
//	edit:JOB@AT=SPEC      promote:standby@AT
//
// TARGET is "holder", "writer", "committer", "leader" (leader mode) or
// "nodeN" (N from 1). SERVER is postgres,
// redis, etcd, zookeeper or nats (also pg and zk). AT, FOR and D are Go
// durations ("3s", "1.5s", "250ms"); latency's D is at most 1m.
// kill:etcd kills the cluster's leader, kill:zookeeper the member most of
// the nodes' sessions are on, kill:nats the server that leads the lease
// bucket's stream; each comes back 2 s after the kill (at the end of the
// run if that is sooner). An edit changes the run's catalog row of JOB: SPEC is its new
// cadence (a duration, taking effect as catalog edits do, a second after
// the commit), pause or resume; for a JOB not in the catalog, EVERY/WORK
// (a --catalog row after its "=") adds that schedule from then on.
// promote:standby fails the lab's PostgreSQL over to its hot standby (a
// run with --standby). The error quotes the spec, says what is
// wrong, and wraps aegis.ErrInvalid.
func ParseChaos(spec string) (Chaos, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return Chaos{}, invalid("chaos %q: want KIND:TARGET…, such as pause:holder@3s+2s", spec)
	}
	c := Chaos{Kind: ChaosKind(kind)}
	var err error
	switch c.Kind {
	case Pause, Partition:
		err = c.parseWindow(rest)
	case Kill, Failover, Restart, Crash:
		err = c.parseServerFault(rest)
	case Promote:
		err = c.parsePromote(rest)
	case Skew:
		err = c.parseSkew(rest)
	case Latency:
		err = c.parseLatency(rest)
	case Edit:
		err = c.parseEdit(rest)
	default:
		err = fmt.Errorf("unknown kind %q (want pause, kill, failover, restart, crash, promote, partition, skew, latency or edit)", kind)
	}
	if err != nil {
		return Chaos{}, invalid("chaos %q: %s", spec, err)
	}
	return c, nil
}

// The parsers of each kind's spec after its "KIND:", for ParseChaos. Their
// errors say what is wrong; ParseChaos quotes the spec before them.

// parseWindow parses pause's and partition's TARGET@AT+FOR[/SERVER].
func (c *Chaos) parseWindow(rest string) error {
	form := string(c.Kind) + ":TARGET@AT+FOR"
	if c.Kind == Partition {
		form += "[/SERVER]"
	}
	target, when, ok := strings.Cut(rest, "@")
	if !ok {
		return fmt.Errorf("missing @AT (want %s)", form)
	}
	at, dur, ok := strings.Cut(when, "+")
	if !ok {
		return fmt.Errorf("missing +FOR (want %s)", form)
	}
	if d, server, ok := strings.Cut(dur, "/"); ok {
		if c.Kind != Partition {
			return fmt.Errorf("/%s: only a partition is to one server (want pause:TARGET@AT+FOR)", server)
		}
		k, err := servers.ParseKind(server)
		if err != nil {
			return fmt.Errorf("server %q: want postgres, redis, etcd, zookeeper or nats", server)
		}
		dur, c.Server = d, string(k)
	}
	if err := c.setTarget(target, true); err != nil {
		return err
	}
	var err error
	if c.At, err = duration("AT", at, false); err != nil {
		return err
	}
	c.For, err = duration("FOR", dur, true)
	return err
}

// parseServerFault parses kill's, failover's, restart's and crash's
// TARGET@AT.
func (c *Chaos) parseServerFault(rest string) error {
	target, at, ok := strings.Cut(rest, "@")
	if !ok {
		form := map[ChaosKind]string{Kill: "kill:TARGET@AT", Crash: "crash:postgres@AT"}[c.Kind]
		if form == "" {
			form = string(c.Kind) + ":redis@AT"
		}
		return fmt.Errorf("missing @AT (want %s)", form)
	}
	if err := c.setServerTarget(target); err != nil {
		return err
	}
	var err error
	c.At, err = duration("AT", at, false)
	return err
}

// parsePromote parses promote's standby@AT.
func (c *Chaos) parsePromote(rest string) error {
	target, at, ok := strings.Cut(rest, "@")
	if !ok {
		return errors.New("missing @AT (want promote:standby@AT)")
	}
	if target != Standby {
		return fmt.Errorf("target %q: only the hot standby can be promoted (want promote:standby@AT)", target)
	}
	c.Target = target
	var err error
	c.At, err = duration("AT", at, false)
	return err
}

// parseSkew parses skew's nodeN=±D.
func (c *Chaos) parseSkew(rest string) error {
	target, d, ok := strings.Cut(rest, "=")
	if !ok {
		return errors.New("missing =±D (want skew:nodeN=+500ms)")
	}
	if err := c.setTarget(target, false); err != nil {
		return err
	}
	var err error
	c.Offset, err = signedDuration("D", d)
	return err
}

// parseLatency parses latency's SERVER=D.
func (c *Chaos) parseLatency(rest string) error {
	server, d, ok := strings.Cut(rest, "=")
	if !ok {
		return errors.New("missing =D (want latency:SERVER=D, such as latency:redis=20ms)")
	}
	kind, err := servers.ParseKind(server)
	if err != nil {
		return fmt.Errorf("server %q: want postgres, redis, etcd, zookeeper or nats", server)
	}
	c.Target = string(kind)
	if c.Offset, err = duration("D", d, true); err != nil {
		return err
	}
	if c.Offset > maxLatency {
		return fmt.Errorf("the delay D=%s is more than %s, the most a round trip is slowed: longer only stalls every node for the whole run", d, maxLatency)
	}
	return nil
}

// maxLatency bounds latency's D: a round trip a minute late already
// outlasts any lab run's leases and ticks.
const maxLatency = time.Minute

// parseEdit parses edit's JOB@AT=SPEC.
func (c *Chaos) parseEdit(rest string) error {
	job, rest, ok := strings.Cut(rest, "@")
	at, spec, ok2 := strings.Cut(rest, "=")
	if !ok || !ok2 {
		return errors.New("want edit:JOB@AT=SPEC, such as edit:invoice-export@3s=2s or edit:certificates@2s=pause")
	}
	if !jobNamePattern.MatchString(job) || len(job) > maxJobNameLen {
		return fmt.Errorf("job %.50q: want 1 to %d of a-z, 0-9, '-' and '_'", job, maxJobNameLen)
	}
	c.Target = job
	var err error
	if c.At, err = duration("AT", at, false); err != nil {
		return err
	}
	switch {
	case spec == "pause" || spec == "resume":
		c.Spec = spec
	case strings.Contains(spec, "/"):
		// A schedule to add: a --catalog row's EVERY/WORK.
		if _, err := ParseCatalog(job + "=" + spec); err != nil {
			return fmt.Errorf("SPEC %q: a schedule to add is EVERY/WORK[/no-keep-alive], such as 2s/300ms (%v)", spec, err)
		}
		c.Spec = spec
	default:
		if c.Offset, err = duration("SPEC", spec, true); err != nil {
			return fmt.Errorf("SPEC %q: want a cadence (a duration such as 2s), pause, resume, or EVERY/WORK to add a schedule", spec)
		}
		c.Spec = c.Offset.String()
	}
	return nil
}

// setServerTarget sets the target of kill (a node, or an etcd, ZooKeeper
// or NATS member), failover and restart (redis) and crash (postgres),
// and says which fault a server has when it is the wrong one.
func (c *Chaos) setServerTarget(target string) error {
	if c.Kind == Restart && target == RedlockMajority {
		c.Target = target
		return nil
	}
	k, err := servers.ParseKind(target)
	if err != nil {
		if c.Kind == Kill {
			if _, ok := parseNode(target); !ok && !movingTarget(target) {
				return fmt.Errorf("target %q: want holder, writer, committer, leader, nodeN (N from 1), etcd, zookeeper or nats", target)
			}
			c.Target = target
			return nil
		}
		k = servers.Kind(target)
	}
	want := map[ChaosKind][]servers.Kind{
		Kill:     killable,
		Failover: {servers.KindRedis},
		Restart:  {servers.KindRedis},
		Crash:    {servers.KindPostgres},
	}[c.Kind]
	if slices.Contains(want, k) {
		c.Target = string(k)
		return nil
	}
	faults := map[servers.Kind]string{
		servers.KindPostgres:  "crash:postgres@AT or promote:standby@AT",
		servers.KindRedis:     "failover:redis@AT or restart:redis@AT",
		servers.KindEtcd:      "kill:etcd@AT",
		servers.KindZooKeeper: "kill:zookeeper@AT",
		servers.KindNATS:      "kill:nats@AT",
	}
	only := map[ChaosKind]string{Kill: "of the servers, only etcd, zookeeper and nats", Failover: "only redis", Restart: "only redis", Crash: "only postgres"}[c.Kind]
	verb := map[ChaosKind]string{Kill: "killed", Failover: "failed over", Restart: "restarted", Crash: "crashed"}[c.Kind]
	if fault, ok := faults[k]; ok {
		return fmt.Errorf("target %q: %s can be %s (%s's fault is %s)", target, only, verb, k, fault)
	}
	return fmt.Errorf("target %q: %s can be %s (want %s:%s@AT)", target, only, verb, c.Kind, want[0])
}

// setTarget sets a node target: "holder", "writer", "committer" or
// "leader" (when anyOK) or "nodeN".
func (c *Chaos) setTarget(target string, anyOK bool) error {
	if movingTarget(target) {
		if !anyOK {
			return fmt.Errorf("target %q: %s needs a node (nodeN), the %s changes during a run", target, c.Kind, target)
		}
		c.Target = target
		return nil
	}
	if _, ok := parseNode(target); !ok {
		if anyOK {
			return fmt.Errorf("target %q: want holder, writer, committer, leader or nodeN (N from 1)", target)
		}
		return fmt.Errorf("target %q: want nodeN (N from 1)", target)
	}
	c.Target = target
	return nil
}

func parseNode(target string) (int, bool) {
	digits, ok := strings.CutPrefix(target, "node")
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// signedDuration parses a positive duration with an optional sign, + or
// -, of at most a day either way.
func signedDuration(name, s string) (time.Duration, error) {
	body, neg := strings.CutPrefix(s, "-")
	if !neg {
		body, _ = strings.CutPrefix(s, "+")
	}
	if strings.HasPrefix(body, "+") || strings.HasPrefix(body, "-") {
		return 0, fmt.Errorf("%s %q has more than one sign", name, s)
	}
	d, err := duration(name, body, true)
	if err != nil {
		return 0, err
	}
	if neg {
		d = -d
	}
	return d, nil
}

// duration parses a non-negative Go duration (positive when positive is
// set) of at most a day.
func duration(name, s string, positive bool) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("%s is empty (want a duration such as 3s)", name)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a duration (want one such as 3s or 250ms)", name, s)
	}
	switch {
	case d < 0:
		return 0, fmt.Errorf("%s %s is negative", name, s)
	case positive && d == 0:
		return 0, fmt.Errorf("%s %s must be positive", name, s)
	case d > maxChaosDuration:
		return 0, fmt.Errorf("%s %s is longer than %s", name, s, maxChaosDuration)
	}
	return d, nil
}
