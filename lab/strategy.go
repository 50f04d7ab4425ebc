package lab

import (
	"slices"

	"github.com/aegislab/aegis/internal/servers"
)

// TokenKind says where a strategy's fencing token comes from, which
// decides what --fence does.
type TokenKind string

const (
	// NoToken: the strategy hands out no token; --fence has no effect.
	NoToken TokenKind = "none"
	// LeaseToken: one lease key per run, whose token grows across ticks;
	// the fence is package fence on the balance (aegis_fence), checked
	// when the holder reads the balance and again when it writes.
	LeaseToken TokenKind = "lease"
	// ClaimToken: a token per tick (the claim's version, the job's token);
	// the fence is the claim row's token compared in the transaction of
	// the write.
	ClaimToken TokenKind = "claim"
)

// Strategy is one way the nodes coordinate a tick.
type Strategy struct {
	Name string
	// Backend is the internal/backend name of a lease strategy's Locker
	// ("" for the others).
	Backend string
	// Needs are the servers the strategy needs besides the store of
	// record. PostgreSQL strategies need the store to be PostgreSQL.
	Needs []servers.Kind
	Token TokenKind
	// Summary is one line on how it works.
	Summary string
	// NotGuaranteed is one line on what it does not guarantee.
	NotGuaranteed string
}

// Fenceable reports whether --fence changes anything for the strategy.
func (s Strategy) Fenceable() bool { return s.Token != NoToken }

// Lease reports whether the strategy is a lease over an aegis.Locker.
func (s Strategy) Lease() bool { return s.Backend != "" }

// Strategies lists every strategy, in the order reports show them.
var Strategies = []Strategy{
	{
		Name: "none", Token: NoToken,
		Summary:       "every node runs every tick",
		NotGuaranteed: "anything: every replica runs every tick, so every tick is applied once per node",
	},
	{
		Name: "sqlite", Backend: "sqlite", Token: LeaseToken,
		Summary:       "sqlitelease on one database file, one lease key per run",
		NotGuaranteed: "more than one host; a holder paused past its TTL still writes unless the store checks its token",
	},
	{
		Name: "pg-lease", Backend: "postgres", Needs: []servers.Kind{servers.KindPostgres}, Token: LeaseToken,
		Summary:       "pglease (database time), one lease key per run",
		NotGuaranteed: "that a holder paused past its TTL stops: it still writes unless the fence refuses its token",
	},
	{
		Name: "pg-unique", Needs: []servers.Kind{servers.KindPostgres}, Token: NoToken,
		Summary:       "INSERT … ON CONFLICT DO NOTHING of one row per tick: the constraint is the exclusion",
		NotGuaranteed: "exclusion beyond its row: a paused winner's late write can overwrite a later tick's (a lost update), and a crashed winner's tick stays undone until a reaper reclaims it",
	},
	{
		Name: "pg-advisory", Needs: []servers.Kind{servers.KindPostgres}, Token: NoToken,
		Summary:       "pg_try_advisory_lock held on a dedicated connection",
		NotGuaranteed: "exclusion once its connection drops (the lock goes with it while the holder works on); no token, so it cannot be fenced",
	},
	{
		Name: "optimistic", Token: ClaimToken,
		Summary:       "a version compare-and-set claim per tick, stealable after --ttl by the claimer's clock",
		NotGuaranteed: "exclusion when clocks disagree (a node whose clock is ahead steals a live claim); only the version check on the write stops the loser",
	},
	{
		Name: "redis", Backend: "redis", Needs: []servers.Kind{servers.KindRedis}, Token: LeaseToken,
		Summary:       "redislease on one primary: SET NX PX plus an INCR token",
		NotGuaranteed: "one holder across a pause past the TTL or a failover before replication (which can send the token back): an optimisation unless fenced",
	},
	{
		Name: "redlock", Backend: "redlock", Needs: []servers.Kind{servers.KindRedis}, Token: LeaseToken,
		Summary:       "Redlock over independent Redis primaries, token the majority's greatest counter",
		NotGuaranteed: "one holder under pauses, clock jumps or a node restarted without persistence: not consensus, an optimisation",
	},
	{
		Name: "etcd", Backend: "etcd", Needs: []servers.Kind{servers.KindEtcd}, Token: LeaseToken,
		Summary:       "etcdlease: a session lease, token the key's create revision",
		NotGuaranteed: "that a holder paused past its lease stops: consensus grants the key once, the fence refuses the late write",
	},
	{
		Name: "zookeeper", Backend: "zookeeper", Needs: []servers.Kind{servers.KindZooKeeper}, Token: LeaseToken,
		Summary:       "zklease: an ephemeral sequential node, token its czxid",
		NotGuaranteed: "that a client paused past its session timeout stops: the ensemble gives the lock away, the fence refuses the late write",
	},
	{
		Name: "queue", Needs: []servers.Kind{servers.KindPostgres}, Token: ClaimToken,
		Summary:       "one job per tick through package queue, enqueued once (a row per tick), a worker per node, lease --ttl, completion with CompleteTx",
		NotGuaranteed: "exclusion across jobs (a reclaimed or backlogged tick's job runs alongside a later tick's: a lost update on a shared balance); a worker paused past its lease is stopped only by the fenced completion",
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

// needsPostgresStore reports whether the strategy's SQL runs in the store
// of record and needs it to be PostgreSQL.
func (s Strategy) needsPostgresStore() bool {
	return slices.Contains(s.Needs, servers.KindPostgres) && !s.Lease()
}
