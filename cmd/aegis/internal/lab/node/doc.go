// Package node is a lab node: a process of the aegis executable's `node`
// subcommand ([NodeMain]), one replica of the lab's Task Scheduler. Its
// schedule.Scheduler, in its strategy's mode, binds the run's catalog, and
// each tick it runs is the job's critical section (critical.go) on the
// store of record, through the fence when the run is fenced. It reads its
// config from its flags and its start time and clock changes from stdin,
// and reports every step as a JSON line on stdout: the wire protocol of
// package lab (protocol.go). The lab's own Lockers (no coordination, an
// advisory lock, an optimistic claim, and the strategies wrong on purpose)
// are here (modes.go, broken.go).
package node
