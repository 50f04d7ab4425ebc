package node

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/schedule"
)

// section is one critical section: a tick of a job run by this node.
type section struct {
	job     string
	tick    int
	token   aegis.Token
	lease   aegis.Lease // lease mode
	run     int         // the run's attempt
	attempt string      // node.incarnation.sequence
	work    time.Duration
	fenced  bool
	// deadline is when a failing write gives up (the tick's window).
	deadline time.Time
	// enteredMS is when the section entered (its enter event's time, Unix
	// ms), written in its audit row.
	enteredMS int64
}

// handle is the catalog handler every node registers: the job's critical
// section for the tick the scheduler runs.
func (n *node) handle(ctx context.Context, args json.RawMessage) error {
	run, _ := schedule.RunFrom(ctx)
	until := n.until(run)
	tick := n.tickOf(run.Fire)
	if tick == 0 {
		return nil // before the run's first tick, or after its last
	}
	var a lab.JobArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return fmt.Errorf("lab: the schedule's args %s: %w", args, err)
	}
	s := section{
		job: run.Job, tick: tick, token: run.Token, run: run.Attempt,
		attempt:  fmt.Sprintf("%d.%d.%d", n.c.Node, n.c.Incarnation, n.seq.Add(1)),
		work:     time.Duration(a.WorkMS) * time.Millisecond,
		fenced:   n.c.Fence && n.strat.Fenceable(),
		deadline: run.Fire.Add(n.c.Window),
	}
	s.lease, _ = schedule.LeaseFrom(ctx)
	if !n.strat.Fenceable() {
		s.token = 0 // a lab Locker's token means nothing
	}
	n.emit(lab.NodeEvent{Kind: lab.EvAcquired, Job: s.job, Tick: tick, Token: int64(s.token), RunAttempt: s.run, Owner: lab.OwnerHash(s.lease.Owner), Until: until,
		Granted: n.granted(ctx, s, until)})
	n.critical(ctx, s)
	n.emit(lab.NodeEvent{Kind: lab.EvReleased, Job: s.job, Tick: tick, Token: int64(s.token), RunAttempt: s.run})
	return nil
}

// event is the node event of s of kind.
func (s section) event(kind string) lab.NodeEvent {
	return lab.NodeEvent{Kind: kind, Job: s.job, Tick: s.tick, Token: int64(s.token), RunAttempt: s.run, Owner: lab.OwnerHash(s.lease.Owner), Attempt: s.attempt}
}

// critical runs the critical section once: read the job's ledger (and,
// fenced, present the token to the fence), work, then write ledger + 1 and
// the EXECUTED row in one transaction (fenced: through the fence).
func (n *node) critical(ctx context.Context, s section) {
	enter := s.event(lab.EvEnter)
	enter.At = time.Now().UnixNano()
	s.enteredMS = enter.At / int64(time.Millisecond)
	n.emit(enter)
	value, err := n.read(ctx, s)
	switch {
	case isStale(err):
		n.emit(s.stale("read", err))
		n.audit(ctx, s, "REFUSED", nil)
		return
	case err != nil:
		e := s.event(lab.EvAbandon)
		e.Detail = "read failed: " + err.Error()
		n.emit(e)
		return
	}
	e := s.event(lab.EvEntered)
	e.Value = &value
	n.emit(e)

	// The work. The node does not look at its lease (or context) again
	// before it writes: a check just before the write leaves the same gap
	// as none, and a paused node resumes here.
	backoff.Sleep(context.WithoutCancel(ctx), s.work)
	n.emit(s.event(lab.EvWriting))

	// The write is retried on errors (a partition, a restarted server)
	// until the tick's window ends, as a client with retries does.
	next := value + 1
	for {
		var stamp int64
		stamp, err = n.write(context.WithoutCancel(ctx), s, next)
		if err == nil || lab.IsUniqueViolation(err) { // a retry of a commit that landed
			e := s.event(lab.EvExecuted)
			e.Value = &next
			if err == nil {
				e.Stamp = stamp // else an earlier try's row landed, stamped then
			}
			n.emit(e)
			return
		}
		if isStale(err) {
			n.emit(s.stale("write", err))
			n.audit(ctx, s, "REFUSED", nil)
			return
		}
		n.emit(lab.NodeEvent{Kind: lab.EvError, Job: s.job, Tick: s.tick, Detail: "write: " + err.Error()})
		if time.Now().After(s.deadline) {
			e := s.event(lab.EvAbandon)
			e.Detail = "write failed: " + err.Error()
			n.emit(e)
			return
		}
		time.Sleep(15*time.Millisecond + rand.N(20*time.Millisecond))
	}
}

// check presents the section's token to the fence in tx, as its
// strategy's token kind says: the read registers it (an older holder's
// pending write can no longer land on what it read), the write checks it.
func (n *node) check(ctx context.Context, tx *sql.Tx, s section) error {
	if !s.fenced {
		return nil
	}
	resource := lab.LedgerResource(n.c.Run, s.job)
	switch n.strat.Token {
	case lab.LeaseToken:
		return fence.CheckLeaseSQL(ctx, tx, resource, s.lease)
	case lab.RunToken:
		return fence.CheckSQL(ctx, tx, resource, s.token)
	case lab.VersionToken:
		key := optimisticKey(n.ns, s.job)
		_, err := fence.ExecSQL(ctx, tx, lab.OptimisticCheckSQL, key, int64(s.token))
		if isStale(err) {
			// Which version refused it, read in the refusing transaction:
			// versions only grow, so it is the refusing one or a later one.
			var held int64
			if tx.QueryRowContext(ctx, lab.OptimisticVersionSQL, key).Scan(&held) == nil {
				return &versionStale{held: held}
			}
		}
		return err
	}
	return nil
}

// versionStale is the optimistic strategy's refusal: the claim row's
// version moved on to held.
type versionStale struct{ held int64 }

func (e *versionStale) Error() string {
	return fmt.Sprintf("%v: the claim's version is now %d", aegis.ErrStale, e.held)
}

func (e *versionStale) Unwrap() error { return aegis.ErrStale }

// heldOf returns the token the store of record held when it refused a
// section's token (err is a refusal), 0 when it does not say.
func heldOf(err error) int64 {
	var fe *fence.StaleError
	if errors.As(err, &fe) {
		return int64(fe.Held)
	}
	var ve *versionStale
	if errors.As(err, &ve) {
		return ve.held
	}
	return 0
}

// stale is the event of s refused by the fence at its read or write
// (phase), with the token the store held and a reason in words.
func (s section) stale(phase string, err error) lab.NodeEvent {
	e := s.event(lab.EvStale)
	e.Held = heldOf(err)
	switch {
	case e.Held == 0:
		e.Detail = fmt.Sprintf("%s: token %d refused", phase, s.token)
	case e.Held == int64(s.token):
		e.Detail = fmt.Sprintf("%s: token %d refused, the store holds %d from another holder", phase, s.token, e.Held)
	default:
		e.Detail = fmt.Sprintf("%s: token %d refused, the store holds %d", phase, s.token, e.Held)
	}
	return e
}

// read is the critical section's first transaction. Fenced, it presents
// the token first: the fence's row lock waits for an older holder's write
// in flight, so that the read that follows (a fresh snapshot under READ
// COMMITTED) sees that write.
func (n *node) read(ctx context.Context, s section) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if err := n.check(ctx, tx, s); err != nil {
		return 0, err
	}
	var value int64
	if err := tx.QueryRowContext(ctx, lab.ReadLedgerSQL, n.c.Run, s.job).Scan(&value); err != nil {
		return 0, err
	}
	return value, tx.Commit()
}

// write is the critical section's second transaction. It returns the
// at_ms its audit row was stamped with.
func (n *node) write(ctx context.Context, s section, value int64) (stamp int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	// The audit row first: a retry of a commit that landed (its answer lost
	// to a cut connection) then fails on the attempt's primary key, which
	// the caller reads as executed, before the fence, which a successor may
	// have moved on since, can call the landed commit stale.
	if stamp, err = n.auditIn(ctx, tx, s, "EXECUTED", &value); err != nil {
		return 0, err
	}
	if err := n.check(ctx, tx, s); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, lab.WriteLedgerSQL, n.c.Run, s.job, value); err != nil {
		return 0, err
	}
	return stamp, tx.Commit()
}

// auditIn writes s's audit row in tx, stamped now (at_ms, which it
// returns).
func (n *node) auditIn(ctx context.Context, tx *sql.Tx, s section, status string, value *int64) (int64, error) {
	at := time.Now().UnixMilli()
	_, err := tx.ExecContext(ctx, lab.AuditSQL, n.c.Run, s.attempt, s.job, s.tick, n.c.Node, int64(s.token),
		lab.OwnerHash(s.lease.Owner), s.run, status, value, at, s.enteredMS)
	return at, err
}

// audit records a refused attempt; it is informational (aegis inspect), so
// an error is only reported.
func (n *node) audit(ctx context.Context, s section, status string, value *int64) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	tx, err := n.db.BeginTx(actx, nil)
	if err == nil {
		defer tx.Rollback()
		if _, err = n.auditIn(actx, tx, s, status, value); err == nil {
			err = tx.Commit()
		}
	}
	if err != nil {
		n.emit(lab.NodeEvent{Kind: lab.EvError, Job: s.job, Tick: s.tick, Detail: "audit: " + err.Error()})
	}
}

func isStale(err error) bool { return errors.Is(err, aegis.ErrStale) }
