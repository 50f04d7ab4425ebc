package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// work runs one claimed job's handler and records its outcome, fenced by
// the claim's token.
func (c *Client) work(p *producer, r *run) {
	defer c.jobsWG.Done()
	defer p.release()
	// A job that waited for a worker (claimed ahead) and whose lease was
	// lost, handed back or expired meanwhile is not started; record writes
	// nothing for a lost one. The phase is checked, not only the context:
	// Stop's hand-back marks every claim lost before it cancels any, so a
	// worker freed by one cancellation never starts a waiting job whose
	// cancellation is still to come.
	if r.phase.Load() == phaseLost || r.ctx.Err() != nil {
		r.timer.Stop()
		c.record(r, context.Cause(r.ctx))
		return
	}
	ctx := r.ctx
	if c.tracer != nil {
		ctx = c.startWork(r)
	}
	err := c.invoke(ctx, r)
	if r.span != nil {
		endWork(r.span, err)
	}
	r.timer.Stop()
	c.record(r, err)
}

// invoke runs the handler with ctx (the job's, with its work span when
// traced); a panic is an error.
func (c *Client) invoke(ctx context.Context, r *run) (err error) {
	h := c.cfg.Workers.lookup(r.row.Kind)
	if h == nil {
		return fmt.Errorf("queue: no worker for kind %q on client %s", r.row.Kind, c.cfg.ID)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("queue: handler panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return h(ctx, r.row)
}

// record writes the outcome of a handler, unless the lease is lost.
func (c *Client) record(r *run, err error) {
	log := jobLogger{c.log, r.row}
	next, write := c.beginWrite(r, err, log)
	if !write {
		return
	}
	defer c.writeDone()

	if next == phasePending {
		c.completer.add(r)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	start := time.Now()
	op, delay, werr := c.writeOutcome(ctx, r.row, err, log)
	if c.tracer != nil {
		c.traceWrite(r, op, start, 0, werr)
	}
	c.wroteOutcome(r.row, log, op, werr, delay)
	c.forget(r)
}

// beginWrite decides, under c.mu, what record does with a handler's
// outcome. It reports false when there is nothing to write: the lease is
// lost (or the client closing), or CompleteTx recorded the completion;
// the claim is then forgotten. Otherwise it moves the claim to its next
// phase (pending when the completer batches the completion, writing
// otherwise) and counts the write in; writeDone counts it out.
func (c *Client) beginWrite(r *run, err error, log jobLogger) (int32, bool) {
	c.mu.Lock()
	ph := r.phase.Load()
	switch {
	case ph == phaseLost || c.closing:
		c.mu.Unlock()
		log.Warn("queue: lease lost: the handler's outcome is not written", "cause", context.Cause(r.ctx), "err", err)
		c.forget(r)
		return ph, false
	case ph == phaseInTx && err == nil:
		// CompleteTx recorded the completion in the handler's transaction.
		c.mu.Unlock()
		c.metrics.completed(r.row.Queue).Inc()
		c.forget(r)
		return ph, false
	}
	next := phaseWriting
	if err == nil && !c.cfg.SyncComplete {
		next = phasePending
	}
	r.phase.Store(next)
	c.writing++
	c.mu.Unlock()
	return next, true
}

// writeOutcome writes the outcome err of job j's handler, fenced by its
// token: complete, snooze, cancel, discard (its last attempt failed) or
// retry. It returns the operation, for a snooze or a retry the delay until
// the job is due again, and the write's error (nil: the write landed; a
// stale error: the fence refused it).
func (c *Client) writeOutcome(ctx context.Context, j *JobRow, err error, log jobLogger) (op string, delay time.Duration, werr error) {
	var (
		snz  *snoozeError
		cncl *cancelError
	)
	id, token := j.ID, int64(j.Token)
	switch {
	case err == nil:
		op = "complete"
		if werr = c.sql.completeOne(ctx, c.pool, id, token); werr == nil {
			c.metrics.completed(j.Queue).Inc()
			log.Debug("queue: job completed")
		}
	case errors.As(err, &snz):
		op = "snooze"
		delay = max(snz.d, 0)
		if werr = c.sql.snooze(ctx, c.pool, id, token, delay); werr == nil {
			c.metrics.snoozed(j.Queue).Inc()
			log.Debug("queue: job snoozed", "for", delay)
		}
	case errors.As(err, &cncl):
		op = "cancel"
		if werr = c.sql.finish(ctx, c.pool, id, token, StateCancelled, cncl.err.Error()); werr == nil {
			c.metrics.cancelled(j.Queue).Inc()
			log.Info("queue: job cancelled by its handler", "err", cncl.err)
		}
	case j.Attempt >= j.MaxAttempts:
		op = "discard"
		c.metrics.failed(j.Queue).Inc()
		if werr = c.sql.finish(ctx, c.pool, id, token, StateDiscarded, err.Error()); werr == nil {
			c.metrics.discarded(j.Queue).Inc()
			log.Error("queue: job failed its last attempt: discarded", "err", err)
		}
	default:
		op = "retry"
		c.metrics.failed(j.Queue).Inc()
		delay = max(c.cfg.RetryBackoff(j.Attempt), 0)
		if werr = c.sql.retry(ctx, c.pool, id, token, delay, err.Error()); werr == nil {
			log.Warn("queue: job failed; retrying", "err", err, "retry_in", delay)
		}
	}
	return op, delay, werr
}

// wroteOutcome reports how writeOutcome's write of op went: a stale write
// is counted and logged, a failed one logged (the job runs again when its
// lease expires), and a job due again after delay wakes the maintenance
// loop then.
func (c *Client) wroteOutcome(j *JobRow, log jobLogger, op string, werr error, delay time.Duration) {
	switch {
	case errors.Is(werr, aegis.ErrStale):
		c.metrics.stale(j.Queue, op).Inc()
		log.Warn("queue: stale write rejected: the job's lease was lost (its token is no longer the job's)", "op", op, "err", werr)
	case werr != nil:
		log.Error("queue: write the job's outcome; it runs again when its lease expires", "op", op, "err", werr)
	case delay > 0:
		c.wakeMaintenance(time.Now().Add(delay))
	}
}

// writeDone ends a write begun in record.
func (c *Client) writeDone() {
	c.mu.Lock()
	c.writing--
	if c.writing == 0 {
		c.writesIdle.Broadcast()
	}
	c.mu.Unlock()
}

// completeTx is JobRow.CompleteTx.
func (c *Client) completeTx(ctx context.Context, tx pgx.Tx, r *run) (err error) {
	j := r.row
	if c.tracer != nil {
		var span trace.Span
		ctx, span = c.startCompleteTx(ctx, r)
		defer func() { endWrite(span, j.Token, err) }()
	}
	err = c.sql.completeOne(ctx, tx, j.ID, int64(j.Token))
	switch {
	case errors.Is(err, aegis.ErrStale):
		r.phase.Store(phaseLost)
		c.metrics.stale(j.Queue, "complete_tx").Inc()
		return stale("CompleteTx", j.ID, int64(j.Token))
	case err != nil:
		return fmt.Errorf("queue: CompleteTx: %w", err)
	}
	return nil
}

// expired is the local deadline of a claim: the lease was not renewed in
// time, so it may expire on the server; the handler must stop.
func (r *run) expired() {
	if r.phase.Load() != phaseWorking {
		return
	}
	r.client.log.Warn("queue: job lease not renewed before its local deadline: cancelling the handler",
		"job_id", r.row.ID, "token", r.row.Token)
	r.cancel(ErrLeaseExpired)
}

func localDeadline(start time.Time, lease time.Duration) time.Time {
	return driver.LocalDeadline(start, lease)
}

// jobLogger logs about one job; the job's attributes are formatted only
// for a record that is logged (slog's With would format them per job).
type jobLogger struct {
	l *slog.Logger
	j *JobRow
}

func (l jobLogger) log(level slog.Level, msg string, args ...any) {
	if !l.l.Enabled(context.Background(), level) {
		return
	}
	j := l.j
	l.l.Log(context.Background(), level, msg, append([]any{"job_id", j.ID, "queue", j.Queue, "kind", j.Kind,
		"token", j.Token, "attempt", j.Attempt}, args...)...)
}

func (l jobLogger) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args...) }
func (l jobLogger) Info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args...) }
func (l jobLogger) Warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args...) }
func (l jobLogger) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args...) }
