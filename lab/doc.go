// Package lab is the Aegis lab engine: it runs a scenario with real node
// processes against real servers, injects real faults, and checks what
// reached the store of record.
//
// A [Session] owns the servers a lab starts (PostgreSQL, Redis, etcd,
// ZooKeeper from the programs installed, on free loopback ports, started
// the first time a run needs them and stopped by Close) or uses the ones
// it is given, and the store of record (PostgreSQL when it has one, else
// SQLite). [Session.Start] starts a [Run]: N processes of the aegis
// executable's `node` subcommand ([NodeMain]), each reaching each server
// through a TCP proxy of its own, each tick trying the tick's critical
// section under a strategy ([Strategies]): read a balance, work, write
// balance + 1 and an EXECUTED audit row, through the fence when the run is
// fenced. Nodes report every step as a JSON line on their standard output,
// so the lab knows who is inside the critical section at every moment and
// can pause it (SIGSTOP), kill it (SIGKILL, then a restart), cut it from
// its servers, skew its clock, slow its round trips, or fail Redis over
// under it ([Chaos], [ParseChaos]).
//
// A run streams its events ([Run.Subscribe]), reports its state
// ([Run.Status]) and takes faults on demand ([Run.Inject]); its [Report]
// counts ticks, executions, duplicate ticks, duplicates applied, stale
// writes refused, missed ticks and lost updates, and carries the verdict of
// a linearizability check of the balance's history (porcupine), with an
// HTML visualisation of a violation.
//
// What the lab does not prove: a clean report is one schedule of faults on
// one machine, not a proof that a strategy is safe; a violation is a
// proof that it is not. The lab never kills, pauses or restarts a server
// it did not start.
package lab
