package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis"
)

// Args are a job's arguments. They are stored as JSON (encoding/json), and
// Kind names the handler that runs them. Kind must not depend on the value:
// it is called on the zero value when a worker is registered.
type Args interface {
	Kind() string
}

// State is where a job is in its life.
type State string

// The states of a job. Available, scheduled and running jobs are live (in
// the hot table); the others are finished.
const (
	StateAvailable State = "available" // due; waiting for a worker
	StateScheduled State = "scheduled" // waiting for its run_at (a delay, a retry's backoff, a snooze)
	StateRunning   State = "running"   // claimed; a worker holds its lease
	StateCompleted State = "completed" // done (kept only when Config.CompletedRetention > 0)
	StateCancelled State = "cancelled" // given up by its handler (Cancel) or by Client.CancelJob: a dead letter
	StateDiscarded State = "discarded" // failed its last attempt: a dead letter
)

// JobRow is a job as stored, without decoded arguments.
type JobRow struct {
	ID    int64
	Queue string
	Kind  string
	// EncodedArgs is the JSON of the job's Args.
	EncodedArgs json.RawMessage
	// Priority orders available jobs of a queue: lower runs first.
	Priority int
	// RunAt is when the job became or becomes due.
	RunAt time.Time
	State State
	// Attempt counts the claims of the job, the current one included;
	// snoozes do not count.
	Attempt     int
	MaxAttempts int
	// Token is the fencing token of the current claim: every claim, and
	// every hand-back (retry, snooze, reclaim by the reaper, shutdown),
	// makes it greater. A handler fences its own side effects with it
	// (fence.Check, or "… WHERE token = $n" on its rows); the queue fences
	// every write it makes after the claim with it.
	Token aegis.Token
	// LockedBy is the ID of the client that holds (or last held) the job.
	LockedBy string
	// UniqueKey is the job's unique key, or "".
	UniqueKey string
	// Errors are the errors of earlier attempts, oldest first.
	Errors      []AttemptError
	CreatedAt   time.Time
	AttemptedAt time.Time // zero before the first claim
	FinalizedAt time.Time // zero for a live job

	run         *run   // the claim this client is working, nil otherwise
	traceparent string // a claimed job's enqueuer's trace context (W3C), "" when none
}

// AttemptError is the error of one attempt.
type AttemptError struct {
	Attempt int         `json:"attempt"`
	Token   aegis.Token `json:"token"`
	At      time.Time   `json:"at"`
	Error   string      `json:"error"`
}

// Job is a job with its decoded arguments, as a handler gets it.
type Job[T Args] struct {
	*JobRow
	Args T
}

// CompleteTx completes the job inside tx, so that the handler's business
// write and the job's completion commit together, or neither does. The
// completion is fenced by the job's token. When the job's token has moved
// on — the reaper gave the job to another worker, an operator cancelled
// it, Stop handed it back, or this client already found the lease lost
// (the handler's context is then cancelled with aegis.ErrLost) — it writes
// nothing and returns an error for which errors.Is(err, aegis.ErrStale)
// holds, whether the database or the client's own books refused it; roll
// back then.
//
// After a successful CompleteTx the client records nothing more for the
// job. When the transaction then does not commit, return an error from the
// handler: the job is retried. (If the handler returns nil anyway, the job
// stays running until its lease expires and the reaper makes it available
// again.) CompleteTx may be called only from the job's handler, once;
// other calls return an error that does not match aegis.ErrStale.
func (j *JobRow) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	r := j.run
	if r == nil {
		return errors.New("queue: CompleteTx: the job is not being worked by this client's handler")
	}
	if !r.completeInTx() {
		switch r.phase.Load() {
		case phaseLost:
			// The heartbeat found the token moved on, or Stop handed the
			// lease back (bumping the token): the database would refuse.
			r.client.metrics.stale(j.Queue, "complete_tx").Inc()
			return stale("CompleteTx", j.ID, int64(j.Token))
		case phaseInTx:
			return fmt.Errorf("queue: CompleteTx: job %d was already completed in a transaction: call it once", j.ID)
		default:
			return fmt.Errorf("queue: CompleteTx: job %d: its handler already returned: call it from the handler", j.ID)
		}
	}
	return r.client.completeTx(ctx, tx, r)
}

// Snooze, returned by a handler, puts the job back to run again after d
// (0: at once), without counting the attempt. The token is bumped: a
// snoozed holder can write nothing more for this claim. A negative d is a
// mistake: Snooze then returns an error matching aegis.ErrInvalid, which,
// returned by the handler, fails the attempt like any other error (it is
// retried with backoff and the error is recorded).
func Snooze(d time.Duration) error {
	if d < 0 {
		return invalid("Snooze(%s): the delay must not be negative", d)
	}
	return &snoozeError{d: d}
}

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("queue: snooze %s", e.d) }

// Cancel, returned by a handler, gives the job up for good: it is not
// retried and goes to the dead letters (state cancelled) with err recorded.
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled by its handler")
	}
	return &cancelError{err: err}
}

type cancelError struct{ err error }

func (e *cancelError) Error() string { return "queue: cancel: " + e.err.Error() }
func (e *cancelError) Unwrap() error { return e.err }

// Errors that cancel a job's context, as context.Cause reports them. Each
// of them, and every other cause the client gives for a lease it no longer
// trusts, matches aegis.ErrLost: a handler stops (and discards what it has
// not committed) when errors.Is(context.Cause(ctx), aegis.ErrLost). When
// the database says the lease is lost (a heartbeat found the job
// reclaimed, cancelled or otherwise taken over), the cause wraps both
// aegis.ErrLost and the heartbeat's refusal (aegis.ErrStale), and nothing
// more is written for the claim.
//
// These are causes, never the error of a write: a fenced write the
// database refuses (complete, CompleteTx, a batched completion, heartbeat,
// retry, snooze, cancel, discard, hand-back) is an error that matches
// aegis.ErrStale.
var (
	// ErrLeaseExpired: the job's local deadline passed without a renewed
	// lease (the database was unreachable or slow). The lease may still be
	// held; the handler should stop, and its completion is still tried,
	// fenced. It wraps aegis.ErrLost, like aegis.Hold's local deadline.
	ErrLeaseExpired = fmt.Errorf("queue: job lease expired locally without a renewal: %w", aegis.ErrLost)
	// ErrStopping: Client.Stop's deadline passed; the lease was handed back
	// with a bumped token. It wraps aegis.ErrLost.
	ErrStopping = fmt.Errorf("queue: client stopping: lease handed back: %w", aegis.ErrLost)
)
