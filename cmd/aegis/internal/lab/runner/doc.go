// Package runner runs the lab: a [Session] owns the servers it starts (or
// is given) and the store of record, and starts a [Run]: the run's node
// processes (package cmd/aegis/internal/lab/node), each behind its own TCP proxies;
// its faults, applied on schedule or on demand ([Run.Inject]); the record
// of what the nodes said (record.go); and, at its end, the report (build.go)
// from the store's SQL recount and the history checker's verdict (package
// cmd/aegis/internal/lab/checker). Scenarios and seeded campaigns ([Campaign]) are
// series of runs. What a run is and what it reports is package lab's.
package runner
