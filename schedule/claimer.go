package schedule

import (
	"context"
	"time"
)

// claimer is what makes a scheduler's mode: how a tick is claimed, so that
// one replica runs it, and what the mode keeps running beside the job
// loops. New picks one from the Config, once; the rest of the scheduler
// calls it and never asks which mode it is in. Each mode's is in its own
// file: runKeyClaimer (runkey.go), leaseClaimer (lease.go) and
// leaderClaimer (leader.go).
type claimer interface {
	// mode names the mode.
	mode() Mode
	// check refuses a job (already checked and with its defaults) whose
	// options the mode does not have. Errors name the field.
	check(j Job) error
	// prepare runs first in Start, under ctx: what the mode needs before
	// any loop (the run-key mode's catalog check, the leader's tables).
	prepare(ctx context.Context) error
	// ownsLoops reports whether the mode runs the job loops and the binder
	// itself (the leader, for each of its terms) rather than Start.
	ownsLoops() bool
	// start starts the mode's own goroutines in the scheduler's WaitGroup
	// (the run-key mode's reaper, the leader's campaigns), until ctx ends.
	start(ctx context.Context)
	// fire claims tick f of j (a Catalog.RunNow's when oneOff) and runs it
	// when this replica wins. done is closed when the run ends (nil when
	// nothing runs here); retryable says whether fire may try again after
	// err, while the tick is on time.
	// tc is the tick's claim across fire's tries (run-key mode's).
	fire(ctx context.Context, j *job, f time.Time, oneOff bool, tc *tickClaim) (done <-chan struct{}, retryable bool, err error)
	// replace is OverlapReplace's part before a tick's claim: prev are
	// this node's runs of j still going.
	replace(j *job, prev []*active)
	// enqueues reports whether a won tick is enqueued for workers rather
	// than run here (the leader): the binder then binds the catalog
	// schedules whose handler this replica does not have.
	enqueues() bool
	// runStore is the run table, whose last run of a job starts the job's
	// loop; nil when the mode has none (lease mode).
	runStore() *Store
	// close releases what the mode holds, once its goroutines are done
	// (Stop), or after a Start that never came.
	close()
}

// Mode is how a Scheduler makes each tick run once, set by the Config
// field given to New.
type Mode string

const (
	// ModeRunKey (Config.Store): a row per (job, fire time); the first
	// insert runs the tick, a reaper retries a crashed run with a greater
	// token.
	ModeRunKey Mode = "run-key"
	// ModeLease (Config.Locker, ShedLock's semantics): the replica whose
	// Locker grants the job's lease at the fire time runs the tick.
	ModeLease Mode = "lease"
	// ModeLeader (Config.Leader): an elected replica enqueues each tick
	// into package queue, and every replica's worker competes for the runs.
	ModeLeader Mode = "leader"
)

// tickClaim is one tick's claim across its tries: the owner its run row
// gets (random), and whether a try that failed may have landed (its reply
// was lost): the next try then reads back the row it may have taken
// before it inserts, or it would find the tick taken, by itself.
type tickClaim struct {
	owner string
	maybe bool
}
