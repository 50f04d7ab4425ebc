package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/testing/servers"
)

var labCommand = command{
	name:    "lab",
	summary: "run lab scenarios: real node processes, real faults, a safety checker",
	run:     runLab,
}

const labUsage = `
usage: aegis lab [--addr 127.0.0.1:7070] [--token T]
       aegis lab run --strategy S [--fence=true|false] [--nodes 3] [--duration 20s]
                     [--tick 1s] [--work 300ms] [--ttl 2s] [--catalog SPEC]
                     [--standby N] [--chaos SPEC]... [--json] [--fail-on-violation]
       aegis lab run --scenario NAME [--json] [--fail-on-violation]
       aegis lab campaign --seed N --runs K [--strategy S]... [--fence=true|false] [--json]

Lab without an action serves the dashboard on --addr and prints its URL:
start runs (one strategy, several side by side, or a preset), watch each
node's critical sections live, inject faults, compare strategies. Ctrl-C
stops it, its runs and the servers it started. On a loopback address it
answers loopback host names only; any other address needs a token, which
every change (starting a run, a fault) must carry: --token, or one is
generated and printed with the URL.

Lab run is a Task Scheduler: a catalog of schedules (--catalog
NAME=EVERY/WORK,...; default invoice-export every tick, seat-assignment
every 2, certificates every 3) shared by N node processes (aegis node),
each a scheduler (package schedule) in the strategy's mode. Each tick of
each job runs the job's critical section: read the job's ledger, work,
write ledger+1 and an EXECUTED audit row (run, job, tick, node, token),
through the fence with --fence=true. Then it reports, per job and in sum,
the ticks, executions, duplicates, stale writes the fence refused, missed
ticks and lost updates, checks each job's history for linearizability
(porcupine: a tick applied twice, a lost update, a stale token accepted),
and says whether that verdict agrees with SQL over the audit and ledger
tables. Without --json it prints a summary and a per-tick table; with
--json one JSON object on standard output and nothing else there
(progress goes to standard error). --fail-on-violation exits 1 when a
run's checker says violation or disagrees with the store. A run that
proves nothing (a node exited on its configuration, under half its job
ticks executed, a fault found no target) is inconclusive: its report says
why, and lab run exits 3.

Lab campaign runs a seeded randomized series of such runs per strategy,
3 to 5 faults each, and fails when a run shows a harm the strategy's label
excludes, or a checker that disagrees with the store ('aegis lab campaign -h').

Strategies: ` + "none, sqlite, pg-lease, pg-unique, pg-advisory, optimistic, redis,\nredlock, etcd, zookeeper, nats, queue; wrong on purpose, for presets: redis-del,\nredis-fail-open, pg-nobump" + `.

Chaos (repeatable; AT from the first tick):
	pause:TARGET@AT+FOR       SIGSTOP the node, SIGCONT after FOR
	kill:TARGET@AT            SIGKILL the node, then restart it
	partition:TARGET@AT+FOR[/SERVER]
	                          drop the node's connections (to SERVER only) for FOR
	skew:nodeN=±D             the node's clock is D off, for the whole run
	latency:SERVER=D          every round trip to SERVER takes D (at most 1m) longer
	failover:redis@AT         the primary dies before replicating a grant; its replica is promoted
	restart:redis@AT          a Redis server restarts without persistence (redis: the single
	                          node; redlock: the first Redlock node)
	restart:redlock@AT        a majority of the Redlock nodes restart without persistence
	crash:postgres@AT         SIGKILL the lab's (durable) PostgreSQL, restart it: crash recovery
	promote:standby@AT        stop the lab's PostgreSQL, promote its hot standby once it has
	                          replayed every commit; every node's store moves to it (--standby)
	kill:etcd@AT              SIGKILL etcd's leader; it comes back 2s later
	kill:zookeeper@AT         SIGKILL the ZooKeeper member with most sessions; back 2s later
	kill:nats@AT              SIGKILL the NATS server leading the lease bucket's stream; back 2s later
	edit:JOB@AT=SPEC          a catalog edit: SPEC is a new cadence (2s), pause or resume;
	                          for a JOB not in the catalog, EVERY/WORK[/no-keep-alive] adds it
TARGET is holder (the node in the critical section then, or the next to
enter it), writer (the node inside its write then, or the next to begin
one) or nodeN; SERVER is postgres, redis, etcd, zookeeper or nats. --standby N
puts the last N nodes in a second region whose store is a hot standby of
the lab's PostgreSQL (pg-unique or queue): they must run nothing until a
promote:standby makes it the primary.

Scenarios: invoice-export, invoice-export-regions, certificates,
nightly-reconciliation, seat-assignment, redis-failover, redlock-majority,
lock-at-most-for, unlock-with-del, reaper-without-bump, redis-down, aegis
(every strategy, fenced and not, one table).

Servers: a kind given with its flag or AEGIS_* variable is used as it is
(the lab never kills or restarts it); the others are started by the lab
from the programs installed (PostgreSQL, Redis, etcd, ZooKeeper, and the
nats-server scripts/services builds) in a
scratch directory on free loopback ports, reused by the runs of a scenario
and stopped on exit, Ctrl-C included. The store of record is PostgreSQL
when the lab has it, else SQLite; a strategy whose servers are missing is
reported unavailable with the package that provides them.
`

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !slices.Contains([]string{"-h", "-help", "--help"}, args[0])) {
		return runLabServe(ctx, args, stdout, stderr)
	}
	switch args[0] {
	case "run":
		return runLabRun(ctx, args[1:], stdout, stderr)
	case "campaign":
		return runLabCampaign(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprintln(stderr, strings.TrimSpace(labUsage))
		return flag.ErrHelp
	}
	return usagef("unknown action %q: want run or campaign, or no action for the dashboard", args[0])
}

// chaosFlag collects --chaos specs.
type chaosFlag []lab.Chaos

func (c *chaosFlag) String() string { return "" }
func (c *chaosFlag) Set(s string) error {
	ch, err := lab.ParseChaos(s)
	if err != nil {
		return err
	}
	*c = append(*c, ch)
	return nil
}

// labServerFlags adds the server flags of the lab. Unlike other commands',
// they default only to the AEGIS_* variables that are set, never to the
// shared test servers: an unset kind is started by the lab.
func labServerFlags(fs *flagSet) func() runner.Servers {
	pg := fs.String("postgres-url", "", "PostgreSQL `URL` to use (default $AEGIS_POSTGRES_URL, not shown: it may carry a password); unset: the lab starts its own")
	redis := addrsVar(fs, "redis-addrs", os.Getenv(servers.EnvRedisAddrs), "Redis `addresses`, comma-separated, the first the single-node one (AEGIS_REDIS_ADDRS)")
	etcd := addrsVar(fs, "etcd-endpoints", os.Getenv(servers.EnvEtcdEndpoints), "etcd `endpoints`, comma-separated (AEGIS_ETCD_ENDPOINTS)")
	zk := addrsVar(fs, "zk-servers", os.Getenv(servers.EnvZKServers), "ZooKeeper `servers`, comma-separated (AEGIS_ZK_SERVERS)")
	natsURLs := addrsVar(fs, "nats-urls", os.Getenv(servers.EnvNATSURLs), "NATS server `URLs` (nats://host:port), comma-separated (AEGIS_NATS_URLS)")
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	return func() runner.Servers {
		return runner.Servers{PostgresURL: cmp.Or(*pg, os.Getenv(servers.EnvPostgresURL)), RedisAddrs: split(*redis), EtcdEndpoints: split(*etcd), ZKServers: split(*zk), NATSURLs: split(*natsURLs)}
	}
}

// runFlags adds the flags of one run and returns the function that reads
// them, after parsing, as a Config. A campaign's replay lines are these
// flags (runner.RunArgs).
func runFlags(fs *flagSet) func() lab.Config {
	d := lab.DefaultConfig()
	c := d
	fs.StringVar(&c.Strategy, "strategy", "", "the `strategy`")
	fs.BoolVar(&c.Fence, "fence", d.Fence, "write through the fence")
	fs.IntVar(&c.Nodes, "nodes", d.Nodes, "how many node processes")
	fs.DurationVar(&c.Duration, "duration", d.Duration, "how long ticks fire (ticks = duration / tick)")
	fs.DurationVar(&c.Tick, "tick", d.Tick, "the tick interval")
	fs.DurationVar(&c.Work, "work", d.Work, "the work inside the critical section")
	fs.DurationVar(&c.TTL, "ttl", d.TTL, "the lease TTL (optimistic: the claim's)")
	var chaos chaosFlag
	fs.Var(&chaos, "chaos", "a fault `SPEC` (repeatable)")
	fs.IntVar(&c.Standby, "standby", 0, "put the last `N` nodes in a second region, on a hot standby of the lab's PostgreSQL")
	fs.Var((*catalogFlag)(&c.Catalog), "catalog", "the run's schedules, `NAME=EVERY/WORK,...` (default: three jobs at 1, 2 and 3 ticks)")
	return func() lab.Config {
		c.Chaos = chaos
		return c
	}
}

// catalogFlag is --catalog.
type catalogFlag []lab.JobSpec

func (c *catalogFlag) String() string { return lab.FormatCatalog(*c) }
func (c *catalogFlag) Set(s string) error {
	jobs, err := lab.ParseCatalog(s)
	if err != nil {
		return err
	}
	*c = jobs
	return nil
}

func runLabRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab", stderr, labUsage)
	config := runFlags(fs)
	failOnViolation := fs.Bool("fail-on-violation", false, "exit 1 when a run's checker says violation or disagrees with the store")
	scenario := fs.String("scenario", "", "run the preset `NAME` instead: "+strings.Join(lab.ScenarioNames(), ", "))
	asJSON := fs.Bool("json", false, "print one JSON object")
	// Not the current directory: runs left their pages in checkouts.
	out := fs.String("out", "", "`directory` for the checker's visualisation of a violation (default $TMPDIR, else /tmp)")
	dir := fs.String("dir", "", "scratch `directory` for the servers the lab starts (default: a temporary one, removed on exit)")
	given := labServerFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	*out = cmp.Or(*out, os.TempDir())
	sc, err := labScenario(fs, *scenario, config())
	if err != nil {
		return err
	}

	s, err := runner.NewSession(runner.Options{Dir: *dir, Servers: given(), Log: stderr})
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(stderr, "aegis lab: stop the servers: %v\n", err)
		}
	}()
	if sc.Name != "" {
		fmt.Fprintf(stderr, "aegis lab: scenario %s (%s)\n  watch: %s\n", sc.Name, sc.Seed, sc.Watch)
	}
	begin := time.Now()
	reports, err := s.RunScenario(ctx, sc, *out, func(r *lab.Report) {
		state := "checker " + r.Checker + ", verdict " + r.Verdict
		if r.Unavailable != "" {
			state = "unavailable: " + r.Unavailable
		}
		fmt.Fprintf(stderr, "aegis lab: %s done after %.0fs: %s\n", r.Config, time.Since(begin).Seconds(), state)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	var done []*lab.Report
	for _, r := range reports {
		if r != nil {
			done = append(done, r)
		}
	}
	if werr := writeReports(stdout, sc, done, *asJSON); werr != nil {
		return werr
	}
	if *asJSON { // the summary names it; JSON has no field for it
		for _, r := range done {
			if r.Visualisation != "" {
				fmt.Fprintf(stderr, "aegis lab: %s: the checker's visualisation of the violation: %s\n", r.Config, r.Visualisation)
			}
		}
	}
	if err != nil {
		return errors.New("interrupted: the report covers what ran until then")
	}
	return labRunStatus(sc, done, *failOnViolation)
}

// labScenario is what aegis lab run runs: the preset named by --scenario
// (which sets every run itself: no run flag may be given with it), or the
// one run the flags configure.
func labScenario(fs *flagSet, name string, c lab.Config) (lab.Scenario, error) {
	if name == "" {
		if err := c.Validate(); err != nil {
			return lab.Scenario{}, usagef("%v", err)
		}
		return lab.Scenario{Runs: []lab.Config{c}}, nil
	}
	sc, ok := lab.LookupScenario(name)
	if !ok {
		return lab.Scenario{}, usagef("--scenario %q: unknown (known: %s)", name, strings.Join(lab.ScenarioNames(), ", "))
	}
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "strategy", "fence", "nodes", "duration", "tick", "work", "ttl", "chaos", "catalog", "standby":
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) > 0 {
		return lab.Scenario{}, usagef("--scenario %s sets the runs itself: drop %s", name, strings.Join(set, ", "))
	}
	return sc, nil
}

// exitInconclusive is aegis lab run's exit status when a run is
// inconclusive and nothing else failed: a script tells it from 0 (the run
// proved what it showed) and 1 (an error, or a violation with
// --fail-on-violation).
const exitInconclusive = 3

// labRunStatus is aegis lab run's exit status once its report is out: an
// error when its only run's strategy was unavailable; with
// --fail-on-violation, when a run's checker says violation or disagrees
// with the store; else exitInconclusive when a run's verdict is
// inconclusive.
func labRunStatus(sc lab.Scenario, done []*lab.Report, failOnViolation bool) error {
	if len(sc.Runs) == 1 && len(done) == 1 && done[0].Unavailable != "" {
		return fmt.Errorf("strategy %s is unavailable: %s", done[0].Strategy, done[0].Unavailable)
	}
	for _, r := range done {
		switch {
		case !failOnViolation || r.Unavailable != "":
		case !r.StoreAgrees:
			return fmt.Errorf("%s: checker disagrees with the store: %s", r.Config, r.Disagreement)
		case r.Checker == lab.CheckViolation:
			return fmt.Errorf("%s: checker: violation (harms: %v)", r.Config, r.Harms)
		}
	}
	for _, r := range done {
		if r.Unavailable == "" && r.Verdict == lab.VerdictInconclusive {
			return &exitError{exitInconclusive, fmt.Errorf("%s: inconclusive: %s", r.Config, strings.Join(r.Inconclusive, "; "))}
		}
	}
	return nil
}

// scenarioJSON is the --json form of a scenario with several runs.
type scenarioJSON struct {
	Scenario    string            `json:"scenario"`
	Runs        []*lab.Report     `json:"runs"`
	Unavailable map[string]string `json:"unavailable,omitempty"`
}

func writeReports(w io.Writer, sc lab.Scenario, reports []*lab.Report, asJSON bool) error {
	if len(sc.Runs) == 1 {
		if len(reports) == 0 {
			return nil
		}
		r := reports[0]
		if asJSON {
			if r.Unavailable != "" {
				return nil // the error says why, on stderr
			}
			return json.NewEncoder(w).Encode(r)
		}
		return r.WriteSummary(w)
	}
	if asJSON {
		out := scenarioJSON{Scenario: sc.Name, Runs: []*lab.Report{}}
		for _, r := range reports {
			if r.Unavailable != "" {
				if out.Unavailable == nil {
					out.Unavailable = map[string]string{}
				}
				out.Unavailable[r.Strategy] = r.Unavailable
				continue
			}
			out.Runs = append(out.Runs, r)
		}
		return json.NewEncoder(w).Encode(out)
	}
	fmt.Fprintf(w, "aegis lab run --scenario %s: %s\n", sc.Name, sc.Seed)
	if len(sc.Runs) > 0 {
		fmt.Fprintf(w, "each run: %s\n\n", sc.Runs[0].Params())
	}
	return lab.WriteComparison(w, reports)
}
