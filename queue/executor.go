package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/outcome"
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
	start := time.Now()
	err := c.invoke(ctx, r)
	p.observe(time.Since(start))
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
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if ok, rerr := c.landed(ctx, r.row, "complete", nil); rerr != nil || !ok {
		return false
	}
	log.Warn("queue: the handler failed, but its CompleteTx had committed: the job is completed", "err", errtext.Of(err))
	c.metrics.completed(r.row.Queue).Inc()
	c.forget(r)
	return true
}

// jobOutcome is what the client writes for a handler's result: op
// (complete, snooze, cancel, discard or retry), for a snooze or a retry
// the delay until the job is due again, and the error text it records
// (made storable: internal/errtext).
type jobOutcome struct {
	op    string
	delay time.Duration
	text  string
}

// outcomeOf decides the outcome of job j's handler from its error.
func (c *Client) outcomeOf(j *JobRow, err error) jobOutcome {
	var (
		snz  *snoozeError
		cncl *cancelError
	)
	switch {
	case err == nil:
		return jobOutcome{op: "complete"}
	case errors.As(err, &snz):
		return jobOutcome{op: "snooze", delay: max(snz.d, 0)}
	case errors.As(err, &cncl):
		return jobOutcome{op: "cancel", text: errtext.Of(cncl.err)}
	case j.Attempt >= j.MaxAttempts:
		return jobOutcome{op: "discard", text: errtext.Of(err)}
	}
	return jobOutcome{op: "retry", delay: max(c.cfg.RetryBackoff(j.Attempt), 0), text: errtext.Of(err)}
}

// writeOutcome writes o for r's claim, fenced by its token, and returns
// nil once it landed, or a stale error when the token had moved on. It
// retries until the claim's local deadline, and reads the job back when a
// try whose reply was lost may have landed (internal/outcome).
func (c *Client) writeOutcome(r *run, o *jobOutcome, log jobLogger) error {
	j := r.row
	res := outcome.Write{
		Text:     o.text,
		Deadline: r.deadline(),
		Try: func(ctx context.Context, text string) error {
			o.text = text
			return c.writeOnce(ctx, j, o)
		},
		Refused: func(err error) bool { return errors.Is(err, aegis.ErrStale) },
		Landed:  func(ctx context.Context, texts []string) (bool, error) { return c.landed(ctx, j, o.op, texts) },
		Stop:    c.isClosing,
		Log:     func(msg string, args ...any) { log.Warn("queue: "+msg, append([]any{"op", o.op}, args...)...) },
	}.Do()
	return res.Err
}

// writeOnce sends o's statement for job j.
func (c *Client) writeOnce(ctx context.Context, j *JobRow, o *jobOutcome) error {
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

// landed reads job j to tell whether the write of op, which a later try
// found refused, had landed in a try whose reply was lost (texts: the
// texts the tries sent). Every write of an outcome moves the claim's token
// on (or deletes the row); what else moves it (the reaper,
// Client.CancelJob, a hand-back) records an error entry of its own with
// the claim's token, and a write of op with a text records that text.
func (c *Client) landed(ctx context.Context, j *JobRow, op string, texts []string) (bool, error) {
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
			return len(texts) > 0 && texts[0] != "" && slices.Contains(texts, e.Error), nil
		}
	}
	switch op {
	case "complete":
		return now.State == StateCompleted && now.Token == j.Token, nil
	case "snooze":
		return now.Token > j.Token, nil
	}
	return false, nil
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
func (c *Client) wroteOutcome(j *JobRow, log jobLogger, o jobOutcome, werr error) {
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
