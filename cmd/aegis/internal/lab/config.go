package lab

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

// Config is one run: a strategy, its parameters and its faults. The flags
// of `aegis lab run` fill it; [DefaultConfig] has their defaults.
type Config struct {
	// Scenario is the preset the run belongs to, "" for none.
	Scenario string
	Strategy string
	// Fence writes through the fence. It changes nothing for a strategy
	// without a token (none, pg-unique, pg-advisory), whose report says
	// fenced false.
	Fence    bool
	Nodes    int
	Duration time.Duration // ticks = Duration / Tick
	Tick     time.Duration
	Work     time.Duration
	TTL      time.Duration
	// Standby puts the last Standby nodes in a second region: their store
	// is a hot standby of the lab's own PostgreSQL, read-only, so their
	// schedulers must never run a tick (run-key mode: schedule's
	// EventNotPrimary; leader mode: the standby refuses their election and
	// their queue claims) until a promote:standby fault makes it the
	// primary. Default 0; lease mode refuses it.
	Standby int
	// Catalog is the run's schedules; nil is DefaultCatalog(Tick, Work).
	Catalog []JobSpec
	Chaos   []Chaos
	// OutDir is where the checker's visualisation of a violation is
	// written; "" writes none.
	OutDir string
}

// DefaultConfig returns the defaults of `aegis lab run`: fenced, 3 nodes,
// 20 s of 1 s ticks, 300 ms of work, a 2 s TTL.
func DefaultConfig() Config {
	return Config{Fence: true, Nodes: 3, Duration: 20 * time.Second, Tick: time.Second, Work: 300 * time.Millisecond, TTL: 2 * time.Second}
}

// Limits of a run's parameters.
const (
	MaxNodes = 16
	MaxTicks = 1000
)

// Ticks is how many ticks the run fires.
func (c Config) Ticks() int {
	if c.Tick <= 0 {
		return 0
	}
	return int(c.Duration / c.Tick)
}

// Jobs is the run's catalog as it starts: Catalog, or the default one.
func (c Config) Jobs() []JobSpec {
	if c.Catalog != nil {
		return c.Catalog
	}
	return DefaultCatalog(c.Tick, c.Work)
}

// Window is how long after a tick fires its execution still counts: time
// for a reaper to retry a crashed run (its row expires after the TTL) and
// for the retry to work and write, or for a failing write to keep trying.
// It is 2 × TTL + the longest work + tick; a job's tick nobody executed by
// then is missed.
func (c Config) Window() time.Duration {
	return 2*c.TTL + c.longestWork() + c.Tick
}

// longestWork is the longest work of the run's jobs, those its edits add
// included.
func (c Config) longestWork() time.Duration {
	var work time.Duration
	for _, j := range c.Jobs() {
		work = max(work, j.Work)
	}
	for _, ch := range c.Chaos {
		if j, ok := ch.Added(); ok {
			work = max(work, j.Work)
		}
	}
	return work
}

// Validate checks the configuration and says what is wrong, naming the
// flag and quoting its value, in an error that wraps aegis.ErrInvalid.
func (c Config) Validate() error {
	s, ok := LookupStrategy(c.Strategy)
	switch {
	case c.Strategy == "":
		return invalid("--strategy is required (%s)", strings.Join(StrategyNames(), ", "))
	case !ok:
		return invalid("--strategy %q: unknown (known: %s)", c.Strategy, strings.Join(StrategyNames(), ", "))
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return invalid("--nodes %d: want 1 to %d", c.Nodes, MaxNodes)
	case c.Tick < 10*time.Millisecond:
		return invalid("--tick %s: want at least 10ms", c.Tick)
	case c.Tick%time.Millisecond != 0:
		return invalid("--tick %s: want a whole number of milliseconds, as the catalog's intervals are", c.Tick)
	case c.Duration < c.Tick:
		return invalid("--duration %s: want at least one tick (%s)", c.Duration, c.Tick)
	case c.Ticks() > MaxTicks:
		return invalid("--duration %s / --tick %s is %d ticks: want at most %d", c.Duration, c.Tick, c.Ticks(), MaxTicks)
	case c.Work < 0:
		return invalid("--work %s: must not be negative", c.Work)
	case c.TTL <= 0:
		return invalid("--ttl %s: must be positive", c.TTL)
	case c.TTL > time.Hour:
		return invalid("--ttl %s: want at most 1h", c.TTL)
	case c.TTL%time.Millisecond != 0:
		return invalid("--ttl %s: want a whole number of milliseconds, which the catalog stores", c.TTL)
	case s.Mode == schedule.ModeLeader && c.TTL < 100*time.Millisecond:
		return invalid("--ttl %s: the queue strategy's job lease is at least 100ms", c.TTL)
	}
	if err := checkJobs(c.Jobs(), c.Tick); err != nil {
		return err
	}
	switch {
	case c.Standby < 0 || c.Standby >= c.Nodes:
		return invalid("--standby %d: want 0 to %d (the primary's region keeps a node)", c.Standby, c.Nodes-1)
	case c.Standby > 0 && s.Mode == schedule.ModeLease:
		return invalid("--standby: %s is in lease mode: a second region on a standby is the run table's story (pg-unique) or the leader's (queue), whose claims and election a standby refuses", s.Name)
	}
	if promotes := slices.DeleteFunc(slices.Clone(c.Chaos), func(ch Chaos) bool { return ch.Kind != Promote }); len(promotes) > 1 {
		return invalid("--chaos %s: a run promotes its standby once (it also has %s)", promotes[1], promotes[0])
	}
	var errs []error
	for _, ch := range c.Chaos {
		if err := c.CheckChaos(s, ch); err != nil {
			errs = append(errs, invalid("--chaos %s: %v", ch, err))
		}
	}
	return errors.Join(errs...)
}

// CheckChaos says why ch cannot be a fault of a run of s, or nil. What
// depends on the session (a server it did not start, a store that is
// SQLite) is Session.admitChaos's.
func (c Config) CheckChaos(s Strategy, ch Chaos) error {
	if n := ch.Node(); n > c.Nodes {
		return fmt.Errorf("node%d does not exist: the run has %d nodes", n, c.Nodes)
	}
	if ch.At > c.Duration {
		return fmt.Errorf("@%s is after the run's %s", ch.At, c.Duration)
	}
	if (ch.Kind == Pause || ch.Kind == Kill || ch.Kind == Partition) && ch.Target == Leader && s.Mode != schedule.ModeLeader {
		return fmt.Errorf("%s has no leader: the leader target is for leader mode (queue), not %s mode", s.Name, s.Mode)
	}
	switch ch.Kind {
	case Edit:
		i := slices.IndexFunc(c.Jobs(), func(j JobSpec) bool { return j.Name == ch.Target })
		add, adding := ch.Added()
		switch {
		case adding && i >= 0:
			return fmt.Errorf("job %q is in the run's catalog already: an edit of it is a cadence, pause or resume", ch.Target)
		case adding:
			jobs := slices.Clone(c.Jobs())
			for _, other := range c.Chaos {
				if a, ok := other.Added(); ok && other != ch && a.Name != add.Name {
					jobs = append(jobs, a)
				}
			}
			if err := checkJobs(append(jobs, add), c.Tick); err != nil {
				return err
			}
			if add.Work > c.longestWork() {
				// The nodes' window (how long a tick's write may go on)
				// is set when they start.
				return &LongWorkError{Job: ch.Target, Work: add.Work, Longest: c.longestWork()}
			}
			return nil
		case i < 0:
			return fmt.Errorf("job %q is not in the run's catalog (%s): to add it, give its EVERY/WORK", ch.Target, FormatCatalog(c.Jobs()))
		}
		if ch.Offset != 0 {
			edited := c.Jobs()[i]
			edited.Every = ch.Offset
			if err := checkJobs([]JobSpec{edited}, c.Tick); err != nil {
				return err
			}
		}
	case Failover:
		if s.Redis != RedisPrimary {
			return fmt.Errorf("failover:redis needs a strategy on the Redis primary with a replica (redis), not %s", s.Name)
		}
	case Restart:
		if ch.Target == RedlockMajority && s.Redis != RedisQuorum {
			return fmt.Errorf("restart:redlock restarts a majority of Redlock's nodes: it needs --strategy redlock, not %s", s.Name)
		}
		if !slices.Contains(s.Needs, servers.KindRedis) {
			return fmt.Errorf("restart:redis needs a Redis strategy (redis or redlock), not %s", s.Name)
		}
	case Kill:
		if k, ok := ch.ServerKind(); ok && !slices.Contains(s.Needs, k) {
			return fmt.Errorf("%s does not use %s: %s", s.Name, k, usesServers(s))
		}
	case Partition:
		if s.LeaseFile {
			return fmt.Errorf("%s has no network to partition: its lease is a file on this host, and the lab's proxies sit between nodes and servers", s.Name)
		}
		if k := servers.Kind(ch.Server); k != "" && !usesServer(s, k) {
			return fmt.Errorf("%s does not use %s: %s", s.Name, k, usesServers(s))
		}
	case Latency:
		if k := servers.Kind(ch.Target); !usesServer(s, k) {
			return fmt.Errorf("%s does not use %s", s.Name, ch.Target)
		}
	case Promote:
		if c.Standby == 0 {
			return errors.New("the run has no standby to promote: give it a second region (--standby N)")
		}
	}
	// Crash needs nothing of the strategy: every run writes to the store
	// of record, which is the PostgreSQL it crashes (when it is SQLite,
	// admitChaos refuses it).
	return nil
}

// usesServer reports whether s's nodes reach a server of kind k: the
// servers it needs, and PostgreSQL, the store of record.
func usesServer(s Strategy, k servers.Kind) bool {
	return k == servers.KindPostgres || slices.Contains(s.Needs, k)
}

// usesServers says which servers s's nodes reach.
func usesServers(s Strategy) string {
	var names []string
	for _, k := range s.Needs {
		if k != servers.KindPostgres {
			names = append(names, string(k))
		}
	}
	if len(names) == 0 {
		return "it uses only the store of record (postgres)"
	}
	return "it uses " + strings.Join(names, " and ") + " besides the store of record (postgres)"
}

// invalid is a caller's mistake (a flag, a chaos spec): its message names
// the flag and quotes the value (the command line prints it as it is).
func invalid(format string, args ...any) error { return badinput.Errorf(format, args...) }

// Fenced reports whether the run's writes go through a fence.
func (c Config) Fenced() bool {
	s, _ := LookupStrategy(c.Strategy)
	return c.Fence && s.Fenceable()
}

// JSON is the report's form of c.
func (c Config) JSON() ConfigJSON {
	chaos := []string{}
	for _, ch := range c.Chaos {
		chaos = append(chaos, ch.String())
	}
	return ConfigJSON{Strategy: c.Strategy, Fence: c.Fence, Nodes: c.Nodes, Standby: c.Standby, Duration: c.Duration.String(), Tick: c.Tick.String(),
		Work: c.Work.String(), TTL: c.TTL.String(), Catalog: FormatCatalog(c.Jobs()), Chaos: chaos}
}

// String describes the run in one line.
func (c Config) String() string {
	fence := "unfenced"
	if c.Fenced() {
		fence = "fenced"
	} else if s, _ := LookupStrategy(c.Strategy); !s.Fenceable() {
		fence = "no token to fence with"
	}
	return fmt.Sprintf("%s, %s, %s", c.Strategy, fence, c.Params())
}

// Params describes the run's parameters and faults, without the strategy.
func (c Config) Params() string {
	var chaos []string
	for _, ch := range c.Chaos {
		chaos = append(chaos, ch.String())
	}
	line := fmt.Sprintf("%d nodes, %d ticks of %s, ttl %s, catalog %s", c.Nodes, c.Ticks(), c.Tick, c.TTL, FormatCatalog(c.Jobs()))
	if len(chaos) > 0 {
		line += "; chaos " + strings.Join(chaos, " ")
	}
	return line
}

// LongWorkError refuses a schedule added to a running run that works
// longer than the run's longest job: the window a run's nodes give a tick
// (Config.Window) is set from its longest work when they start. Its
// Error names the aegis command's way out (--chaos); a page says its own.
type LongWorkError struct {
	Job     string
	Work    time.Duration // the added schedule's
	Longest time.Duration // the run's longest
}

func (e *LongWorkError) Error() string {
	return fmt.Sprintf("job %q: WORK %s is longer than the run's longest (%s): schedule the edit with the run (--chaos) to add a longer one", e.Job, e.Work, e.Longest)
}
