package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/errtext"
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
			// The stored error has the panic's value and first frames; the
			// log has the whole stack.
			stack := debug.Stack()
			jobLogger{c.log, r.row}.Error("queue: handler panicked", "panic", v, "stack", string(stack))
			err = errors.New("queue: handler " + errtext.Panic(v, stack))
		}
	}()
	return h(ctx, r.row)
}

// record writes the outcome of a handler, unless the lease is lost.
func (c *Client) record(r *run, err error) {
	log := jobLogger{c.log, r.row}
	inTx := r.phase.Load() == phaseInTx
	next, write := c.beginWrite(r, err, log)
	if !write {
		return
	}
	defer c.writeDone()

	if next == phasePending {
		c.completer.add(r)
		return
	}
	if inTx && c.committedInTx(r, err, log) {
		return
	}

	start := time.Now()
	o := c.outcomeOf(r.row, err)
	if o.op == "discard" || o.op == "retry" {
		c.metrics.failed(r.row.Queue).Inc()
	}
	werr := c.writeOutcome(r, &o, log)
	if c.tracer != nil {
		c.traceWrite(r, o.op, start, 0, werr)
	}
	c.wroteOutcome(r.row, log, o, werr)
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

// committedInTx reports whether the CompleteTx of a handler that then
// failed (err) committed after all: the commit's reply was lost, or the
// handler failed after its commit. The job is read; a completed job is
// counted and forgotten, and its failure is not written over it.
func (c *Client) committedInTx(r *run, err error, log jobLogger) bool {
	complete := outcome{op: "complete"}
	if ok, rerr := c.landed(r.row, &complete); rerr != nil || !ok {
		return false
	}
	log.Warn("queue: the handler failed, but its CompleteTx had committed: the job is completed", "err", errtext.Of(err))
	c.metrics.completed(r.row.Queue).Inc()
	c.forget(r)
	return true
}

// outcome is what the client writes for a handler's result: op
// (complete, snooze, cancel, discard or retry), for a snooze or a retry
// the delay until the job is due again, and the error text it records
// (made storable: internal/errtext).
type outcome struct {
	op    string
	delay time.Duration
	text  string
	ascii bool // text is the ASCII fallback: the store refused the text itself
}

// outcomeOf decides the outcome of job j's handler from its error.
func (c *Client) outcomeOf(j *JobRow, err error) outcome {
	var (
		snz  *snoozeError
		cncl *cancelError
	)
	switch {
	case err == nil:
		return outcome{op: "complete"}
	case errors.As(err, &snz):
		return outcome{op: "snooze", delay: max(snz.d, 0)}
	case errors.As(err, &cncl):
		return outcome{op: "cancel", text: errtext.Of(cncl.err)}
	case j.Attempt >= j.MaxAttempts:
		return outcome{op: "discard", text: errtext.Of(err)}
	}
	return outcome{op: "retry", delay: max(c.cfg.RetryBackoff(j.Attempt), 0), text: errtext.Of(err)}
}

// writeOutcome writes o for r's claim, fenced by its token, and returns
// nil once it landed, or a stale error when the token had moved on.
//
// A write is never left to the reaper for what it says: one the store
// refuses for its data is written again at once with its error text as
// ASCII (errtext.ASCII). Any other failure is retried, with the same
// token, until the claim's local deadline: after it the lease may expire
// on the server, the reaper takes the job, and the write would be refused
// anyway. When a try that failed may have landed (its reply was lost), a
// later try finds the token moved on: the job is read then, to tell
// whether the write that landed was this one (landed) or a takeover's.
func (c *Client) writeOutcome(r *run, o *outcome, log jobLogger) error {
	j := r.row
	deadline := r.deadline()
	var first error
	maybe := false // a failed try may have landed
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), min(writeTimeout, max(time.Until(deadline), time.Millisecond)))
		err := c.writeOnce(ctx, j, o)
		cancel()
		switch {
		case err == nil:
			if try > 1 {
				log.Warn("queue: outcome written after a failed try", "op", o.op, "tries", try, "first_err", first)
			}
			return nil
		case errors.Is(err, aegis.ErrStale) && maybe:
			if ok, rerr := c.landed(j, o); rerr == nil && ok {
				log.Warn("queue: outcome written: a try whose reply was lost had landed", "op", o.op, "tries", try, "first_err", first)
				return nil
			}
			return err
		case errors.Is(err, aegis.ErrStale):
			return err
		case isDataError(err) && o.text != "" && !o.ascii:
			log.Warn("queue: the store refused the outcome's error text; writing it as ASCII", "op", o.op, "err", err)
			o.text, o.ascii = errtext.ASCII(o.text, err), true
			continue
		}
		first = cmp.Or(first, err)
		maybe = maybe || !pgconn.SafeToRetry(err)
		wait := outcomeRetry.Delay(try - 1)
		if c.isClosing() || !time.Now().Add(wait).Before(deadline) {
			return fmt.Errorf("%w (tried %d times, until the job's lease ran out locally; the reaper takes the job when it expires)", err, try)
		}
		log.Warn("queue: write the job's outcome; retrying", "op", o.op, "try", try, "retry_in", wait, "err", err)
		time.Sleep(wait)
	}
}

// outcomeRetry spaces the tries of an outcome's write.
var outcomeRetry = backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}

// writeOnce sends o's statement for job j.
func (c *Client) writeOnce(ctx context.Context, j *JobRow, o *outcome) error {
	id, token := j.ID, int64(j.Token)
	switch o.op {
	case "complete":
		return c.sql.completeOne(ctx, c.db, id, token)
	case "snooze":
		return c.sql.snooze(ctx, c.db, id, token, o.delay)
	case "cancel":
		return c.sql.finish(ctx, c.db, id, token, StateCancelled, o.text)
	case "discard":
		return c.sql.finish(ctx, c.db, id, token, StateDiscarded, o.text)
	}
	return c.sql.retry(ctx, c.db, id, token, o.delay, o.text)
}

// landed reads job j to tell whether o's write, which a later try found
// refused, had landed in a try whose reply was lost. Every write of the
// outcome moves the claim's token on (or deletes the row); what else
// moves it (the reaper, Client.CancelJob, a hand-back) records an error
// of its own with the claim's token, and a write of o records o.text.
func (c *Client) landed(j *JobRow, o *outcome) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	now, err := c.Job(ctx, j.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return true, nil // deleted: completed (by this write, or after it by a later claim)
	case err != nil:
		return false, err
	case now.Token == j.Token && now.State == StateRunning:
		return false, nil
	}
	for _, e := range now.Errors {
		if e.Token == j.Token {
			return o.text != "" && e.Error == o.text, nil
		}
	}
	switch o.op {
	case "complete":
		return now.State == StateCompleted && now.Token == j.Token, nil
	case "snooze":
		return now.Token > j.Token, nil
	}
	return false, nil
}

// isDataError reports a write the store refused for its data (SQLSTATE
// class 22, data exception: a NUL or invalid UTF-8 in a text, a value out
// of range).
func isDataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22")
}

// isClosing reports whether Stop's deadline passed: write nothing more.
func (c *Client) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// wroteOutcome reports how the write of o went: a stale write is counted
// and logged, a failed one logged (the job runs again when its lease
// expires), and a job due again after a delay wakes the maintenance loop
// then.
func (c *Client) wroteOutcome(j *JobRow, log jobLogger, o outcome, werr error) {
	switch {
	case errors.Is(werr, aegis.ErrStale):
		c.metrics.stale(j.Queue, o.op).Inc()
		log.Warn("queue: stale write rejected: the job's lease was lost (its token is no longer the job's)", "op", o.op, "err", werr)
		return
	case werr != nil:
		log.Error("queue: write the job's outcome; it runs again when its lease expires", "op", o.op, "err", werr)
		return
	}
	switch o.op {
	case "complete":
		c.metrics.completed(j.Queue).Inc()
		log.Debug("queue: job completed")
	case "snooze":
		c.metrics.snoozed(j.Queue).Inc()
		log.Debug("queue: job snoozed", "for", o.delay)
	case "cancel":
		c.metrics.cancelled(j.Queue).Inc()
		log.Info("queue: job cancelled by its handler", "err", o.text)
	case "discard":
		c.metrics.discarded(j.Queue).Inc()
		log.Error("queue: job failed its last attempt: discarded", "err", o.text)
	case "retry":
		log.Warn("queue: job failed; retrying", "err", o.text, "retry_in", o.delay)
	}
	if o.delay > 0 {
		c.wakeMaintenance(time.Now().Add(o.delay))
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
