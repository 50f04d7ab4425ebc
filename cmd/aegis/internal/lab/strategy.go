package lab

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

// TokenKind says where a strategy's fencing token comes from, which
// decides how --fence checks it.
type TokenKind string

const (
	// NoToken: the strategy hands out no token; --fence has no effect.
	NoToken TokenKind = "none"
	// LeaseToken: the job's lease token, which grows across its ticks;
	// the fence is fence.CheckLeaseSQL on the job's ledger, which refuses
	// a lower token and an equal one from another holder.
	LeaseToken TokenKind = "lease"
	// RunToken: the run's token (a run row's or a queue job's), ordered
	// by fire time, then attempt; the fence is fence.CheckSQL on the job's
	// ledger.
	RunToken TokenKind = "run"
	// VersionToken: the version of the job's claim row (optimistic); the
	// fence is the version compare on the read and the write.
	VersionToken TokenKind = "version"
)

// Once says whether a strategy runs each tick of a job at most once.
type Once string

const (
	OnceNo Once = "no"
	// OnceSkew: while the nodes' clocks differ by less than the job's
	// LockAtLeastFor (half its cadence in the lab), and the lease server
	// grants a key to one holder at a time.
	OnceSkew Once = "while clocks agree"
	// OnceRetry: a tick has one run, but a run whose end was not recorded
	// after its commit (its node crashed, or was cut off or paused past its
	// lease) is retried: at least once.
	OnceRetry Once = "except a retry of a run whose end was lost"
)

// Guarantee is what a strategy keeps, as the lab labels it and the
// campaign checks it.
type Guarantee struct {
	// Ledger: no lost update on a job's ledger, and no write accepted
	// with a token lower than one already accepted (or equal, from
	// another holder).
	Ledger bool
	Once   Once
}

// String says the guarantee in a few words, as tables show it.
func (g Guarantee) String() string {
	parts := []string{"ledger " + map[bool]string{true: "kept", false: "not kept"}[g.Ledger]}
	switch g.Once {
	case OnceNo:
		parts = append(parts, "a tick may run twice")
	default:
		parts = append(parts, "once per tick "+string(g.Once))
	}
	return strings.Join(parts, ", ")
}

// Strategy is one way the nodes coordinate a job's ticks: one row of
// [Strategies].
type Strategy struct {
	Name string
	Mode schedule.Mode
	// Backend is the internal/testing/backend name of a lease strategy's Locker,
	// or, prefixed "lab-", one of the lab's own Lockers (the node's
	// labLockers) for none, pg-advisory, optimistic and the strategies
	// wrong on purpose.
	Backend string
	// Needs are the servers the strategy needs besides the store of
	// record. PostgreSQL strategies need the store to be PostgreSQL.
	Needs []servers.Kind
	Token TokenKind
	// Fenced and Unfenced are what it guarantees with and without --fence
	// (the same for a strategy without a token).
	Fenced, Unfenced Guarantee
	// Summary is one line on how it works.
	Summary string
	// NotGuaranteed is one line on what it does not guarantee.
	NotGuaranteed string
	// WrongOnPurpose: one of the classic mistakes, for its presets
	// (broken.go); the aegis preset leaves it out.
	WrongOnPurpose bool
	// Redis says which of the lab's Redis servers the strategy's Locker
	// uses: the primary with a replica (failover:redis applies) or the
	// independent Redlock primaries (restart:redlock applies).
	Redis RedisUse
	// LeaseFile: the lease is a SQLite file on this host (no network to
	// partition, no server to slow).
	LeaseFile bool
	// TTLUnit is the resolution of the backend's lease TTL, 0 for any
	// whole millisecond: etcd grants whole seconds and refuses any other
	// TTL (etcdlease), and so does NATS (natslease), so their nodes exit
	// on one.
	TTLUnit time.Duration
}

// CheckTTL says why the strategy's nodes would refuse ttl as their lease
// TTL (a TTL not a multiple of TTLUnit), or nil. Config.Validate leaves it
// to the nodes, whose run is then inconclusive; a campaign draws none.
func (s Strategy) CheckTTL(ttl time.Duration) error {
	if s.TTLUnit > 0 && ttl%s.TTLUnit != 0 {
		return fmt.Errorf("--ttl %s: %s's lease TTL must be a multiple of %s", ttl, s.Name, s.TTLUnit)
	}
	return nil
}

// RedisUse is which of the lab's Redis servers a strategy uses.
type RedisUse string

const (
	RedisPrimary RedisUse = "primary" // the single primary, with a replica
	RedisQuorum  RedisUse = "quorum"  // Redlock's independent primaries
)

// Fenceable reports whether --fence changes anything for the strategy.
func (s Strategy) Fenceable() bool { return s.Token != NoToken }

// Guarantee is what the strategy keeps with fence on or off.
func (s Strategy) Guarantee(fenced bool) Guarantee {
	if fenced && s.Fenceable() {
		return s.Fenced
	}
	return s.Unfenced
}

// Safe reports whether the lab labels the strategy safe: the ledger kept
// and each tick run once (under the condition its Once names).
func (s Strategy) Safe(fenced bool) bool {
	g := s.Guarantee(fenced)
	return g.Ledger && g.Once != OnceNo
}

// LabLocked reports whether the strategy's Locker is one of the lab's own.
func (s Strategy) LabLocked() bool { return strings.HasPrefix(s.Backend, labBackend) }

// labBackend prefixes the Backend of a strategy whose Locker is the lab's.
const labBackend = "lab-"

var (
	leaseSafe  = Guarantee{Ledger: true, Once: OnceSkew}
	leaseBare  = Guarantee{Once: OnceSkew}
	nothing    = Guarantee{Once: OnceNo}
	ledgerOnly = Guarantee{Ledger: true, Once: OnceNo}
	runSafe    = Guarantee{Ledger: true, Once: OnceRetry}
	runBare    = Guarantee{Once: OnceRetry}
	postgres   = []servers.Kind{servers.KindPostgres}
)

// Strategies lists every strategy, in the order reports show them.
var Strategies = []Strategy{
	{
		Name: "none", Mode: schedule.ModeLease, Backend: "lab-everyone", Token: NoToken, Fenced: nothing, Unfenced: nothing,
		Summary:       "no coordination: a Locker that grants every node, so every replica runs every tick",
		NotGuaranteed: "anything: every tick is applied once per node",
	},
	{
		Name: "sqlite", Mode: schedule.ModeLease, Backend: "sqlite", LeaseFile: true, Token: LeaseToken, Fenced: leaseSafe, Unfenced: leaseBare,
		Summary:       "lease mode over sqlitelease on one database file",
		NotGuaranteed: "more than one host; a holder paused past its TTL still writes unless the fence refuses its token; a node whose clock lags by more than LockAtLeastFor runs a tick again",
	},
	{
		Name: "pg-lease", Mode: schedule.ModeLease, Backend: "postgres", Needs: postgres, Token: LeaseToken, Fenced: leaseSafe, Unfenced: leaseBare,
		Summary:       "lease mode over pglease (database time)",
		NotGuaranteed: "that a holder paused past its TTL stops: it still writes unless the fence refuses its token; a node whose clock lags by more than LockAtLeastFor runs a tick again",
	},
	{
		Name: "pg-unique", Mode: schedule.ModeRunKey, Needs: postgres, Token: RunToken, Fenced: runSafe, Unfenced: runBare,
		Summary:       "run-key mode: INSERT … ON CONFLICT DO NOTHING of one row per (job, fire time), a reaper that retries a crashed run with a greater token",
		NotGuaranteed: "exclusion beyond its row unless fenced (a paused run's late write lands over a later tick's: a lost update); a run whose end was lost after its commit (a crash, a partition, a pause past its lease) is retried: applied twice",
	},
	{
		Name: "pg-advisory", Mode: schedule.ModeLease, Backend: "lab-advisory", Needs: postgres, Token: NoToken, Fenced: nothing, Unfenced: nothing,
		Summary:       "lease mode over pg_try_advisory_lock held on a dedicated connection",
		NotGuaranteed: "exclusion once its connection drops (the lock goes with it while the holder works on); no token, so it cannot be fenced",
	},
	{
		Name: "optimistic", Mode: schedule.ModeLease, Backend: "lab-optimistic", Token: VersionToken, Fenced: ledgerOnly, Unfenced: nothing,
		Summary:       "lease mode over a version compare-and-set claim row per job, stealable after --ttl by the claimer's clock",
		NotGuaranteed: "exclusion when clocks disagree (a node whose clock is ahead steals a live claim, one that lags runs a tick again): only the version check on the write stops the loser",
	},
	{
		Name: "redis", Mode: schedule.ModeLease, Backend: "redis", Needs: []servers.Kind{servers.KindRedis}, Redis: RedisPrimary, Token: LeaseToken, Fenced: ledgerOnly, Unfenced: nothing,
		Summary:       "lease mode over redislease on one primary: SET NX PX plus an INCR token",
		NotGuaranteed: "one holder across a pause past the TTL or a failover before replication (which can send the token back: the owner-aware fence then refuses the successor until the counter passes): an optimisation unless fenced",
	},
	{
		Name: "redlock", Mode: schedule.ModeLease, Backend: "redlock", Needs: []servers.Kind{servers.KindRedis}, Redis: RedisQuorum, Token: LeaseToken, Fenced: ledgerOnly, Unfenced: nothing,
		Summary:       "lease mode over Redlock on independent Redis primaries, token the majority's greatest counter",
		NotGuaranteed: "one holder under pauses, clock jumps or a node restarted without persistence: not consensus, an optimisation",
	},
	{
		Name: "etcd", Mode: schedule.ModeLease, Backend: "etcd", Needs: []servers.Kind{servers.KindEtcd}, TTLUnit: time.Second, Token: LeaseToken, Fenced: leaseSafe, Unfenced: leaseBare,
		Summary:       "lease mode over etcdlease: an etcd lease per grant, token the key's create revision",
		NotGuaranteed: "that a holder paused past its lease stops: consensus grants the key once, the fence refuses the late write",
	},
	{
		Name: "zookeeper", Mode: schedule.ModeLease, Backend: "zookeeper", Needs: []servers.Kind{servers.KindZooKeeper}, Token: LeaseToken, Fenced: leaseSafe, Unfenced: leaseBare,
		Summary:       "lease mode over zklease: an ephemeral sequential node, token its czxid",
		NotGuaranteed: "that a client paused past its session timeout stops: the ensemble gives the lock away, the fence refuses the late write",
	},
	{
		Name: "nats", Mode: schedule.ModeLease, Backend: "nats", Needs: []servers.Kind{servers.KindNATS}, TTLUnit: time.Second, Token: LeaseToken, Fenced: leaseSafe, Unfenced: leaseBare,
		Summary:       "lease mode over natslease: a create-if-absent on a JetStream key-value bucket of three replicas, with the key's TTL, token the grant's stream revision",
		NotGuaranteed: "that a holder paused past its lease stops: the stream's RAFT leader grants the key once, the fence refuses the late write; progress while the stream elects a new leader (4 to 9 s); expiry on any clock but the stream leader's",
	},
	// Wrong on purpose (broken.go): the classic mistakes of lease code, for
	// its presets.
	{
		Name: "redis-del", WrongOnPurpose: true, Mode: schedule.ModeLease, Backend: "lab-redis-del", Needs: []servers.Kind{servers.KindRedis}, Redis: RedisPrimary, Token: LeaseToken, Fenced: ledgerOnly, Unfenced: nothing,
		Summary:       "SET NX PX, unlocked with a plain DEL instead of compare-and-delete",
		NotGuaranteed: "one holder: a holder paused past its TTL deletes its successor's key on release, and a third node takes it while the second works",
	},
	{
		Name: "redis-fail-open", WrongOnPurpose: true, Mode: schedule.ModeLease, Backend: "lab-fail-open", Needs: []servers.Kind{servers.KindRedis}, Redis: RedisPrimary, Token: LeaseToken, Fenced: ledgerOnly, Unfenced: nothing,
		Summary:       "redislease, but when Redis cannot be reached the tick runs anyway (fail open)",
		NotGuaranteed: "anything while Redis is down: every node runs every tick (fail closed, the redis strategy, runs none)",
	},
	{
		Name: "pg-nobump", WrongOnPurpose: true, Mode: schedule.ModeLease, Backend: "lab-nobump", Needs: postgres, Token: RunToken, Fenced: nothing, Unfenced: nothing,
		Summary:       "a PostgreSQL lease row whose reaper takes an expired lease over keeping its token, fenced by the bare token (fence.CheckSQL)",
		NotGuaranteed: "that the fence stops a paused holder: its successor has the same token, so its late write lands (fence.CheckLease, owner-aware, refuses it)",
	},
	{
		Name: "queue", Mode: schedule.ModeLeader, Needs: postgres, Token: RunToken, Fenced: runSafe, Unfenced: runBare,
		Summary:       "leader mode: an elected node enqueues each tick into package queue once, every node's worker competes, a reclaimed run has a greater token",
		NotGuaranteed: "exclusion across runs unless fenced (a reclaimed run beside the next tick's: a lost update); a run whose end was lost after its commit (a crash, a partition, a pause past its lease) is retried: applied twice",
	},
}

// StrategyNames lists the strategies' names in report order.
func StrategyNames() []string {
	names := make([]string, len(Strategies))
	for i, s := range Strategies {
		names[i] = s.Name
	}
	return names
}

// LookupStrategy returns the strategy called name.
func LookupStrategy(name string) (Strategy, bool) {
	i := slices.IndexFunc(Strategies, func(s Strategy) bool { return s.Name == name })
	if i < 0 {
		return Strategy{}, false
	}
	return Strategies[i], true
}

// NeedsPostgresStore reports whether the strategy's SQL runs in the store
// of record and needs it to be PostgreSQL.
func (s Strategy) NeedsPostgresStore() bool {
	return slices.Contains(s.Needs, servers.KindPostgres) && (s.Mode != schedule.ModeLease || s.LabLocked())
}

// Excludes lists the harms the strategy's label excludes in a run of cfg:
// what the campaign holds it to.
func (s Strategy) Excludes(cfg Config) []Harm {
	g := s.Guarantee(cfg.Fence)
	var out []Harm
	if g.Ledger {
		out = append(out, HarmLostUpdate, HarmStaleAccepted)
	}
	// A fresh re-fire (a tick run again after it committed, not by a
	// retry) is a duplicate: excluded wherever duplicates are.
	switch g.Once {
	case OnceRetry:
		out = append(out, HarmDuplicate, HarmRefire)
	case OnceSkew:
		if cfg.maxSkewApart() < cfg.minLockAtLeastFor() {
			out = append(out, HarmDuplicate, HarmRetryDuplicate, HarmRefire)
		}
	}
	return out
}

// maxSkewApart is the greatest difference between two nodes' clocks.
func (c Config) maxSkewApart() time.Duration {
	offsets := map[int]time.Duration{}
	for _, ch := range c.Chaos {
		if ch.Kind == Skew {
			offsets[ch.Node()] = ch.Offset
		}
	}
	lo, hi := time.Duration(1<<63-1), -time.Duration(1<<63-1)
	for n := 1; n <= c.Nodes; n++ {
		lo, hi = min(lo, offsets[n]), max(hi, offsets[n])
	}
	return max(hi-lo, 0)
}

// minLockAtLeastFor is the smallest LockAtLeastFor of the run's jobs.
func (c Config) minLockAtLeastFor() time.Duration {
	least := time.Duration(1<<63 - 1)
	for _, j := range c.Jobs() {
		least = min(least, j.Entry(c).LockAtLeastFor)
	}
	return least
}
