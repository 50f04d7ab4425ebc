package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/queue"
)

// The queue strategy: the seed's certificate queue. Each tick is one job
// of package queue, and the nodes are its workers.
//
//   - Every node enqueues every tick at its fire time (its own clock), in
//     one transaction with the tick's row in aegis_lab_claim (INSERT … ON
//     CONFLICT DO NOTHING, state QUEUED): the first node's insert wins and
//     enqueues; the others insert nothing and enqueue nothing. The row is
//     the once-ever record (the queue's unique key, lab/RUN/TICK, holds
//     only among live jobs, so a late node could enqueue a finished tick
//     again without it). No election: the row is the election of each
//     tick, as in pg-unique.
//   - Every node runs a queue.Client with one worker on the run's queue
//     (lab/RUN), Lease = --ttl, heartbeats every TTL/3, a reaper every
//     TTL/4. A paused worker stops heartbeating; its lease expires in
//     database time; a reaper (any node's) makes the job available with a
//     greater token; another worker claims it and runs the tick.
//   - The handler is the tick's critical section: read the balance (skip
//     a tick already executed), work, write balance + 1 and the EXECUTED
//     row. Like the lease nodes it does not look at its lease (the job's
//     context) before writing. Fenced, the write and the job's completion
//     commit in one transaction (CompleteTx): a worker whose token moved on
//     gets aegis.ErrStale and its write is rolled back (stale_rejected).
//     Unfenced, the write commits on its own, then the handler returns and
//     the queue completes the job: the queue still refuses the stale
//     completion (it fences its own writes), but the balance and the
//     EXECUTED row have landed: a duplicate.

func init() {
	strategyLoops["queue"] = queueLoop
	storeSetups["queue"] = migrateQueue
}

// tickJob is a tick's job.
type tickJob struct {
	Run  string `json:"run"`
	Tick int    `json:"tick"`
}

func (tickJob) Kind() string { return "aegis_lab_tick" }

// queueName is the run's queue: runs sharing a store never take each
// other's jobs.
func queueName(run string) string { return "lab/" + run }

// migrateQueue creates the queue's tables in the store.
func migrateQueue(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return queue.Migrate(ctx, pool)
}

// errAbandon, from a write, ends the attempt at once (no retry in place):
// the job is retried by the queue instead.
var errAbandon = errors.New("abandoned")

// queueLoop runs a node of the queue strategy: it enqueues the ticks and
// works the run's queue until every tick is executed or past its window.
func queueLoop(ctx context.Context, n *node, start time.Time) {
	cfg, err := pgxpool.ParseConfig(n.pgURL)
	if err != nil {
		n.fatal = fmt.Errorf("queue: the store's URL: %w", err)
		return
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		n.fatal = fmt.Errorf("queue: connect: %w", err)
		return
	}
	defer pool.Close()

	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[tickJob](func(jctx context.Context, job *queue.Job[tickJob]) error {
		return n.work(ctx, jctx, pool, start, job)
	}))
	c, err := queue.New(pool, &queue.Config{
		ID:           fmt.Sprintf("node%d.%d", n.c.Node, n.c.Incarnation),
		Queues:       map[string]queue.QueueConfig{queueName(n.c.Run): {MaxWorkers: 1}},
		Workers:      ws,
		Lease:        n.c.TTL,
		ReapInterval: max(n.c.TTL/4, 10*time.Millisecond),
		PollInterval: max(min(n.c.Tick/4, 250*time.Millisecond), 10*time.Millisecond),
		RetryBackoff: func(int) time.Duration { return retry() },
		SyncComplete: true,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		n.fatal = fmt.Errorf("queue: %w", err)
		return
	}
	if err := c.Start(ctx); err != nil {
		n.fatal = fmt.Errorf("queue: %w", err)
		return
	}
	defer func() {
		// Graceful: a handler inside its critical section (a paused node
		// just resumed) finishes its write, refused or not.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.c.Work+10*time.Second)
		defer cancel()
		if err := c.Stop(sctx); err != nil {
			n.fail(0, "stop the queue client", err)
		}
	}()

	for tick := n.firstTick(start); tick <= n.c.Ticks; tick++ {
		fire := start.Add(time.Duration(tick-1) * n.c.Tick)
		if !sleep(ctx, fire.Sub(n.now())) {
			return
		}
		for {
			err := n.enqueue(ctx, pool, c, tick)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			n.fail(tick, "enqueue", err)
			if n.now().After(fire.Add(n.c.Window)) || !sleep(ctx, retry()) {
				break
			}
		}
	}
	// Every tick is enqueued (by some node): wait until each is executed or
	// past its window, then stop.
	last := start.Add(time.Duration(n.c.Ticks-1)*n.c.Tick + n.c.Window)
	for n.now().Before(last) {
		var executed int
		err := n.db.QueryRowContext(ctx, executedTicksSQL, n.c.Run).Scan(&executed)
		if err == nil && executed >= n.c.Ticks {
			break
		}
		if err != nil && ctx.Err() == nil {
			n.fail(0, "count the executed ticks", err)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
	n.emit(nodeEvent{Kind: evFinished})
}

// enqueue enqueues tick's job unless a node already did: the tick's row
// and the job commit together.
func (n *node) enqueue(ctx context.Context, pool *pgxpool.Pool, c *queue.Client, tick int) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, queueTickSQL, n.c.Run, tick, n.c.Node, n.now().UnixMilli())
		if err != nil || tag.RowsAffected() == 0 {
			return err // another node enqueued it
		}
		_, err = c.EnqueueTx(ctx, tx, tickJob{Run: n.c.Run, Tick: tick}, &queue.EnqueueOpts{
			Queue:       queueName(n.c.Run),
			UniqueKey:   fmt.Sprintf("lab/%s/%d", n.c.Run, tick),
			MaxAttempts: 1000, // errors are retried until the tick's window ends
		})
		return err
	})
}

// work is the handler of a tick's job: the tick's critical section, with
// the job's token. nodeCtx is the node's (the run's) context: like the
// lease nodes, the handler does not look at its lease (jctx) before it
// writes.
func (n *node) work(nodeCtx, jctx context.Context, pool *pgxpool.Pool, start time.Time, job *queue.Job[tickJob]) error {
	tick := job.Args.Tick
	deadline := start.Add(time.Duration(tick-1)*n.c.Tick + n.c.Window)
	if !n.now().Before(deadline) {
		n.emit(nodeEvent{Kind: evGaveUp, Tick: tick, Token: int64(job.Token), Detail: "the tick's window ended before its job ran"})
		return queue.Cancel(errors.New("the tick's window ended"))
	}
	n.emit(nodeEvent{Kind: evAcquired, Tick: tick, Token: int64(job.Token)})
	tctx, cancel := context.WithTimeout(nodeCtx, deadline.Sub(n.now()))
	defer cancel()
	n.writeFn = func(ctx context.Context, tick int, token aegis.Token, attempt string, value int64, fenced bool) error {
		if fenced {
			return n.writeCompleteTx(ctx, pool, job, tick, attempt, value)
		}
		return n.write(ctx, tick, token, attempt, value, false)
	}
	res := n.critical(tctx, tick, job.Token, true)
	n.writeFn = nil
	if errors.Is(context.Cause(jctx), aegis.ErrLost) {
		n.emit(nodeEvent{Kind: evLost, Tick: tick, Token: int64(job.Token), Detail: context.Cause(jctx).Error()})
	} else {
		n.emit(nodeEvent{Kind: evReleased, Tick: tick, Token: int64(job.Token)})
	}
	switch res {
	case attemptCommitted, attemptDone:
		return nil // completed by CompleteTx (fenced), or by the queue now (fenced by the queue)
	case attemptStale:
		return nil // refused: the queue writes nothing more for this claim
	}
	if !n.now().Before(deadline) {
		return queue.Cancel(errors.New("the tick's window ended"))
	}
	return errors.New("the attempt failed; the queue retries the job")
}

// writeCompleteTx is the fenced write: the balance, the EXECUTED row and
// the job's completion in one transaction. A worker whose token moved on
// gets aegis.ErrStale from CompleteTx and its write is rolled back.
func (n *node) writeCompleteTx(ctx context.Context, pool *pgxpool.Pool, job *queue.Job[tickJob], tick int, attempt string, value int64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after a commit, a no-op
	// The audit row first: a retry of a commit that did land stops here
	// (its primary key), before CompleteTx.
	if _, err := tx.Exec(ctx, auditSQL, n.c.Run, attempt, tick, n.c.Node, int64(job.Token), "EXECUTED", value, time.Now().UnixMilli()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, writeBalanceSQL, n.c.Run, value); err != nil {
		return err
	}
	if err := job.CompleteTx(ctx, tx); err != nil {
		if errors.Is(err, aegis.ErrStale) {
			return err
		}
		// CompleteTx ran in an earlier transaction of this attempt whose
		// commit failed: only the queue's retry of the job can go on.
		return fmt.Errorf("%w: %w", errAbandon, err)
	}
	return tx.Commit(ctx)
}
