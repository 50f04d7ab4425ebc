// Package lab is the Aegis lab's data: what a run is, what it reports, and
// what its node processes say. The lab runs the Task Scheduler with real
// node processes against real servers, under real faults, and checks what
// reached the store of record. Its rooms: this package (a run's [Config]
// with its [Strategy], [Chaos] and [JobSpec]s, its [Event]s and [Report],
// the nodes' wire protocol in protocol.go and the store's SQL in sql.go);
// package cmd/aegis/internal/lab/node (a node process); package
// cmd/aegis/internal/lab/runner (a session: servers, a run's nodes, faults, record,
// verdict, campaigns); package cmd/aegis/internal/lab/checker (the history checker).
//
// A run has a catalog of schedules ([JobSpec], [DefaultCatalog],
// [ParseCatalog]), each with its own cadence and run time, written into
// package schedule's catalog. Each node is a process of the aegis
// executable's `node` subcommand (node.NodeMain) whose schedule.Scheduler, in
// the strategy's mode (run keys, a lease, or an elected leader and a queue:
// one row of [Strategies]), binds those rows to timers. Each tick of each
// job it runs is the job's critical section: read the job's ledger row,
// work, write ledger + 1 and an EXECUTED audit row (run, job, tick, node,
// token), through the fence when the run is fenced; a fenced read already
// presents the token, so that an older holder's pending write is refused.
// Nodes report every step as a JSON line on their standard output, so the
// lab knows who is inside which critical section at every moment.
//
// A session (runner.Session) owns the servers a lab starts (a durable PostgreSQL, six
// Redis primaries and a replica, a 3-member etcd cluster and ZooKeeper ensemble, from the
// programs installed, on free loopback ports, started the first time a run
// needs them and stopped by Close) or uses the ones it is given, and the
// store of record (PostgreSQL when it has one, else SQLite). Every node
// reaches every server through a TCP proxy of its own. Session.Start
// starts a run; its faults ([Chaos], [ParseChaos]) pause a node
// (SIGSTOP), kill it (SIGKILL, then a restart), cut it from its servers or
// from one, skew its clock, slow its round trips, fail Redis over, restart
// Redis without persistence, crash PostgreSQL or promote its standby, kill an etcd or ZooKeeper
// member, or edit the catalog. Session.Admit, Session.Start and
// Run.Inject admit a fault, for the command line and the dashboard
// alike; the lab never touches a server it did not start.
//
// A run streams its events (Run.Subscribe), reports its state
// (Run.Status) and takes faults on demand (Run.Inject). Its [Report]
// counts, per job and in sum, ticks, executions, duplicate ticks,
// duplicates applied, stale writes refused, missed ticks and lost updates;
// it carries each job's verdict from a linearizability check of the job's
// history ([checker.CheckJobs], porcupine: a tick applied twice, in sequence or
// overlapping, a lost update, a stale token accepted; a correct cascade of
// refusals is not one), with an HTML visualisation of a violation, and
// says whether that verdict agrees with SQL over the audit and ledger
// tables. Presets are [Scenarios]; a seeded randomized
// series of runs is a campaign (runner.Campaign), which fails when a run shows a harm the
// strategy's label excludes.
//
// What the lab does not prove: a clean report, or a clean campaign, is a
// few schedules of faults on one machine over loopback, not a proof that a
// strategy is safe; a violation is a proof that it is not. Side effects
// outside the store are not modelled.
package lab
