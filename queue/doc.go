// Package queue is a job queue on PostgreSQL whose every write after a
// claim is fenced by a token, so a worker that lost its job to another
// cannot finish, fail, snooze or extend it.
//
// A job is a row. A claim is one statement: FOR UPDATE SKIP LOCKED picks up
// to n available jobs of a queue, and the UPDATE around it marks them
// running, bumps each one's token, sets its lease (locked_until, database
// time) and counts the attempt. Every later write — heartbeat, complete,
// retry, snooze, cancel, discard — is one statement with
// "WHERE id = $1 AND token = $2" (or the same predicate over arrays, for
// batches). When it affects no row the lease is lost: nothing is written,
// the write's error matches aegis.ErrStale (CompleteTx returns it; the
// others are logged and counted), and the handler's context is cancelled
// with a cause matching aegis.ErrLost. The reaper
// makes a job whose lease expired available again in one statement that
// bumps its token and re-checks the expiry at write time; so the old
// holder, if it was only paused, writes nothing when it wakes. The token
// never decreases; the attempt count is separate.
//
// Peers such as River complete a job with a predicate on its state alone
// ("state = 'running'"): after a rescue hands the job to a second worker,
// the first one's late completion still lands. Here it is rejected.
//
//	workers := queue.NewWorkers()
//	queue.AddWorker(workers, queue.WorkFunc[SendEmail](func(ctx context.Context, job *queue.Job[SendEmail]) error {
//		return send(ctx, job.Args.To, job.Token) // fence your own side effects with job.Token
//	}))
//	if err := queue.Migrate(ctx, pool); err != nil { … }
//	c, err := queue.New(pool, &queue.Config{Queues: map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 50}}, Workers: workers})
//	err = c.Start(ctx)
//	_, err = c.Enqueue(ctx, SendEmail{To: "a@example.com"}, nil)
//	…
//	err = c.Stop(ctx) // graceful until ctx ends, then leases handed back
//
// # Guarantees
//
//   - A job is run by at most one holder at a time as far as the database
//     is concerned: every write of a holder whose claim was superseded
//     (reaped, cancelled, handed back) is rejected, in the same statement.
//   - A job that completes is never reclaimed: completion deletes the row
//     (or moves it), and the reaper only touches running rows whose lease
//     expired, re-checked at write time.
//   - CompleteTx commits a handler's business write and the job's
//     completion together, or neither.
//   - EnqueueTx enqueues (and notifies) only if the caller's transaction
//     commits. A unique key admits one live job, also under concurrent
//     enqueues.
//
// # What it does not guarantee
//
//   - Exactly-once execution. A job runs at least once; a worker that
//     crashes, or is paused past its lease, after its side effects but
//     before its completion, has its job run again. Make handlers
//     idempotent, or fence their side effects with job.Token (package
//     fence), or write them with CompleteTx.
//   - That a paused handler stops. Its context is cancelled when its lease
//     is lost or its local deadline passes, but a process that is stopped
//     does not see that; only the fence stops its writes. Side effects
//     outside the database (an e-mail) need idempotency at the receiver.
//   - Anything across a failover to an asynchronous replica: the last
//     claims, completions and token bumps can be lost with it.
//
// # Throughput
//
// Claims are sized to the free worker slots and run back to back while a
// queue has a backlog; handlers run on MaxWorkers long-lived goroutines
// per queue. QueueConfig.ClaimAhead keeps more jobs claimed than there are
// workers (held under lease, renewed by heartbeats), with two claims in
// flight, so that a freed worker never waits for a claim's round trip.
// Completions are written in batches (one statement
// for every completion that came in while the previous batch was written,
// each row fenced by id and token) unless Config.SyncComplete is set.
// Finished jobs leave the hot table, so the claim index holds only live
// jobs; heartbeats change only locked_until, which no index contains, so
// they are HOT updates.
//
// # Operations
//
// Stop stops claiming, waits for running jobs until its context ends, then
// hands their leases back with a bumped token. Pause and Resume stop and
// restart claiming of a queue across all clients. DeadJobs and RetryDead
// inspect and revive cancelled and discarded jobs, CancelJob sends a live
// job to them, DiscardDead deletes one for good; they work on a client
// that was never started (aegis console uses them so). Inspector reads the
// tables for an operator (counts, the last hour's throughput and waits,
// stuck jobs, dead letters, one job) through database/sql: aegis console's
// queue pages read only through it. Metrics go to
// Config.Registerer (see the metrics listed in metrics.go), logs to
// Config.Logger, spans to Config.TracerProvider.
//
// # Tracing
//
// With Config.TracerProvider set, an enqueue is a span,
// aegis.queue.enqueue, a child of the caller's; a claim that got jobs (or
// failed) is a span, aegis.queue.claim; each job's handler run is a span,
// aegis.queue.work, linked to its claim's and carried by the handler's
// context (a fence.Check in the handler is its child); the write of its
// outcome is a child of it, aegis.queue.complete (or .retry, .snooze,
// .cancel, .discard), an error with the event aegis.fence.refused when
// the fence refused it. Each carries the job's queue, kind, id, attempt
// and token, and the client's ID (package tracing).
//
// The enqueuer's trace context (the enqueue span's or, for a client
// without a TracerProvider, the span of Enqueue's context) is stored with
// the job, a W3C traceparent (migration 4), and the job's first attempt
// runs as its child: one trace from the request that enqueued the job to
// its work, across processes. A later attempt starts a trace of its own
// linked to it; a job without one, or with one that does not parse, runs
// as a trace of its own. A heartbeat that fails, or finds a job's lease
// lost (a child of that job's run), is aegis.queue.heartbeat; a pass of
// the reaper that did work is aegis.queue.maintenance, its reclaim of
// expired leases the child aegis.queue.reclaim with the jobs counted. An
// idle poll, a heartbeat that renewed every lease and an idle pass are
// not traced, nor Stop's hand-backs. Without a TracerProvider nothing is
// traced, at the cost of a nil check per job; with one whose sampler drops
// a span, its attributes are not built.
package queue
