package lab

import (
	"fmt"
	"slices"
	"time"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// Scenario is a preset that tells one story: one run, or several side by side.
type Scenario struct {
	Name string
	// Seed says the story the preset tells; Watch what to look for.
	Seed, Watch string
	Runs        []Config
	// Parallel is how many of its runs go at once. Default 1.
	Parallel int
}

// pauseHolder is the presets' fault: the holder paused past its 2 s TTL, in
// the middle of its critical section.
var pauseHolder = Chaos{Kind: Pause, Target: Holder, At: 2 * time.Second, For: 3 * time.Second}

func preset(strategy string, fence bool, nodes int, d time.Duration, chaos ...Chaos) Config {
	c := DefaultConfig()
	c.Strategy, c.Fence, c.Nodes, c.Duration, c.Chaos = strategy, fence, nodes, d, chaos
	return c
}

// with returns c with its catalog (and more) changed by f.
func with(c Config, f func(*Config)) Config {
	f(&c)
	return c
}

// invoiceExport is the invoice export job: one export a period, a second apart
// here, exporting for 600 ms.
var invoiceExport = []JobSpec{{Name: "invoice-export", Every: time.Second, Work: 600 * time.Millisecond}}

// Scenarios are the presets of `aegis lab run --scenario NAME`.
var Scenarios = []Scenario{
	{
		Name: "invoice-export",
		Seed: "one invoice export per period (a row per period), its token and its reaper",
		Watch: "the paused exporter's run row expires, a reaper runs the period again with a greater token (run attempt 2), and the paused one's late write is refused by the fence: " +
			"each period applied once; the exporter killed mid-export is retried the same way",
		Runs: []Config{with(preset("pg-unique", true, 3, 10*time.Second,
			Chaos{Kind: Pause, Target: Holder, At: 2 * time.Second, For: 3 * time.Second},
			Chaos{Kind: Kill, Target: Holder, At: 6 * time.Second}), func(c *Config) { c.Catalog = invoiceExport })},
	},
	{
		Name: "invoice-export-regions",
		Seed: "the export across two regions: a primary and a hot standby, promoted halfway",
		Watch: "node3's store is the standby: until the promotion its scheduler sees every tick as not the primary's and never starts the export; at 5s the primary is stopped, " +
			"the standby replays its last commits and is promoted, and node1 and node2 follow it: each period is applied once across the promotion, none run again after it succeeded",
		Runs: []Config{with(preset("pg-unique", true, 3, 10*time.Second, Chaos{Kind: Promote, Target: Standby, At: 5 * time.Second}),
			func(c *Config) { c.Catalog, c.Standby = invoiceExport, 1 })},
	},
	{
		Name:  "certificates",
		Seed:  "the certificate queue, a worker paused past its lease",
		Watch: "the queue hands the paused worker's run to another worker with a greater token; the resumed worker's fenced write is refused",
		Runs:  []Config{preset("queue", true, 3, 10*time.Second, pauseHolder)},
	},
	{
		Name:  "nightly-reconciliation",
		Seed:  "a nightly job run once across three replicas with a lease and a fencing token",
		Watch: "the holder paused past its lease loses it; the next tick's holder has a greater token, and when the paused one resumes the fence refuses its write: the ledger adds up",
		Runs:  []Config{preset("pg-lease", true, 3, 10*time.Second, pauseHolder)},
	},
	{
		Name:  "seat-assignment",
		Seed:  "a Redis SET NX PX lock around seat assignment",
		Watch: "unfenced, the paused holder's late write lands over its successor's (a lost update); fenced, it is refused; the unique key runs each tick once, and fenced it is refused too",
		Runs: []Config{
			preset("redis", false, 3, 8*time.Second, pauseHolder),
			preset("redis", true, 3, 8*time.Second, pauseHolder),
			preset("pg-unique", true, 3, 8*time.Second, pauseHolder),
		},
		Parallel: 3,
	},
	{
		Name:  "redis-failover",
		Seed:  "a Redis primary lost before it replicated a grant; its replica promoted",
		Watch: "the promoted replica's counter is behind: it grants tokens already used. The owner-aware fence refuses an equal token from another holder and a lower one, so nothing is applied twice — and the successors are refused until the counter passes (missed ticks: the liveness cost)",
		Runs:  []Config{preset("redis", true, 3, 10*time.Second, Chaos{Kind: Failover, Target: "redis", At: 3 * time.Second})},
	},
	{
		Name: "redlock-majority",
		Seed: "Redlock, a majority of its nodes restarted without persistence",
		Watch: "tick 4's holder works 600 ms; 200 ms in, a majority of the Redlock nodes restart and forget its key. node3, whose clock lags by 400 ms " +
			"(less than LockAtLeastFor: normally it finds the key held), acquires it and runs tick 4 again: unfenced, the tick is applied twice; " +
			"fenced, node3's token comes from counters that went back and the fence refuses it",
		Runs: []Config{
			with(preset("redlock", false, 3, 8*time.Second, Chaos{Kind: Skew, Target: "node3", Offset: -400 * time.Millisecond},
				Chaos{Kind: Restart, Target: RedlockMajority, At: 3200 * time.Millisecond}), func(c *Config) { c.Catalog = oneLedger }),
			with(preset("redlock", true, 3, 8*time.Second, Chaos{Kind: Skew, Target: "node3", Offset: -400 * time.Millisecond},
				Chaos{Kind: Restart, Target: RedlockMajority, At: 3200 * time.Millisecond}), func(c *Config) { c.Catalog = oneLedger }),
		},
	},
	{
		Name: "lock-at-most-for",
		Seed: "lockAtMostFor shorter than the run, without keep-alive",
		Watch: "each export runs 1.5 s, every second, under a 1 s lockAtMostFor and no keep-alive: its lease expires mid-run, and the next tick's node acquires it while the first still works " +
			"(the first's context is cancelled, but it does not stop): unfenced, both read the same ledger and the late write overwrites (a lost update); fenced, the late write is refused",
		Runs: []Config{
			with(preset("pg-lease", false, 3, 8*time.Second), func(c *Config) {
				c.TTL, c.Catalog = time.Second, []JobSpec{{Name: "export", Every: time.Second, Work: 1500 * time.Millisecond, NoKeepAlive: true}}
			}),
			with(preset("pg-lease", true, 3, 8*time.Second), func(c *Config) {
				c.TTL, c.Catalog = time.Second, []JobSpec{{Name: "export", Every: time.Second, Work: 1500 * time.Millisecond, NoKeepAlive: true}}
			}),
		},
		Parallel: 2,
	},
	{
		Name: "unlock-with-del",
		Seed: "unlock with DEL instead of compare-and-delete",
		Watch: "tick 2's holder is paused past its 800 ms TTL; tick 3's holder takes the key, and the paused one wakes inside that hold and DELs it; node3, whose clock lags by 300 ms, " +
			"finds the key free and runs tick 3 again (applied twice), and the woken holder's write of tick 2 lands over both (unfenced: a lost update; fenced: refused)",
		Runs: []Config{
			with(preset("redis-del", false, 3, 6*time.Second, delFaults()...), func(c *Config) { c.TTL, c.Catalog = 800*time.Millisecond, oneLedgerShort }),
			with(preset("redis-del", true, 3, 6*time.Second, delFaults()...), func(c *Config) { c.TTL, c.Catalog = 800*time.Millisecond, oneLedgerShort }),
		},
	},
	{
		Name:  "reaper-without-bump",
		Seed:  "a reaper that reclaims an expired lease without bumping the token",
		Watch: "the paused holder's successor has the same token, so the bare-token fence accepts the paused one's late write (a lost update); fence.CheckLease, owner-aware, would refuse it",
		Runs:  []Config{preset("pg-nobump", true, 3, 8*time.Second, pauseHolder)},
	},
	{
		Name:  "redis-down",
		Seed:  "Redis down — fail open or fail closed",
		Watch: "every node is cut from Redis for 3 s: failing closed (redis), no tick runs then (missed ticks, nothing applied twice); failing open, every node runs every tick unlocked (duplicates, lost updates)",
		Runs: []Config{
			preset("redis", false, 3, 8*time.Second, redisDown()...),
			preset("redis-fail-open", false, 3, 8*time.Second, redisDown()...),
		},
		Parallel: 2,
	},
	{
		Name:     "aegis",
		Seed:     "every strategy side by side, fenced and not, under the same pause of the holder",
		Watch:    "which strategies apply a tick twice or lose an update, per job; the fence turns the paused holder's late write into a stale rejection",
		Runs:     aegisRuns(),
		Parallel: 3,
	},
}

// oneLedger is a catalog of one job that works long enough for a fault to
// land inside its hold.
var (
	oneLedger      = []JobSpec{{Name: "ledger", Every: time.Second, Work: 600 * time.Millisecond}}
	oneLedgerShort = []JobSpec{{Name: "ledger", Every: time.Second, Work: 400 * time.Millisecond}}
)

// delFaults: node3's clock lags by 300 ms; the holder of tick 2 (fired at
// 1 s) is paused from 1.05 s (its 800 ms lease, last renewed before, has
// expired by 1.9 s) until 2.15 s, inside the hold of tick 3's holder (from
// 2 s to 2.5 s, its LockAtLeastFor), before node3 tries tick 3 at 2.3 s.
func delFaults() []Chaos {
	return []Chaos{{Kind: Skew, Target: "node3", Offset: -300 * time.Millisecond},
		{Kind: Pause, Target: Holder, At: 1050 * time.Millisecond, For: 1100 * time.Millisecond}}
}

// redisDown cuts the three nodes of a preset from Redis for 3 s.
func redisDown() []Chaos {
	var cs []Chaos
	for n := 1; n <= 3; n++ {
		cs = append(cs, Chaos{Kind: Partition, Target: fmt.Sprintf("node%d", n), At: 2 * time.Second, For: 3 * time.Second, Server: string(servers.KindRedis)})
	}
	return cs
}

// aegisRuns are the aegis preset's runs: every strategy that is not wrong
// on purpose, unfenced and fenced.
func aegisRuns() []Config {
	var runs []Config
	for _, s := range Strategies {
		if s.WrongOnPurpose {
			continue
		}
		if s.Fenceable() {
			runs = append(runs, preset(s.Name, false, 3, 8*time.Second, pauseHolder))
		}
		runs = append(runs, preset(s.Name, s.Fenceable(), 3, 8*time.Second, pauseHolder))
	}
	return runs
}

// ScenarioNames lists the presets' names.
func ScenarioNames() []string {
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	return names
}

// LookupScenario returns the preset called name, each run's Scenario set.
func LookupScenario(name string) (Scenario, bool) {
	i := slices.IndexFunc(Scenarios, func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, false
	}
	sc := Scenarios[i]
	sc.Runs = slices.Clone(sc.Runs)
	for j := range sc.Runs {
		sc.Runs[j].Scenario = name
	}
	return sc, true
}
