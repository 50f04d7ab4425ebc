// Package schedule is a single-runner cron scheduler: every replica runs
// the same Scheduler, and each tick of a job runs once across them.
//
// Three modes, chosen by Config:
//
//   - Run-key mode (Config.Store, PostgreSQL or SQLite): a run is (job name,
//     scheduled fire time). Every replica computes the same fire times (cron
//     specs in a fixed zone, intervals aligned to the Unix epoch) and
//     inserts the tick's row with INSERT … ON CONFLICT DO NOTHING; the node
//     whose insert lands runs the tick. Replicas started at different
//     offsets, or whose clocks disagree, insert the same key: the tick runs
//     once. The row records node, token, attempt, start, end and outcome,
//     and is kept alive while the job runs; a reaper on every replica
//     retries a run whose row expired (its node crashed or paused), bumping
//     the token in the statement that reclaims, so the paused runner's
//     writes are fenced.
//   - Lease mode (Config.Locker, any aegis.Locker): ShedLock's semantics. A
//     tick runs on the node that acquires the job's lease: LockAtMostFor is
//     the lease TTL, LockAtLeastFor keeps the lease after an early end,
//     keep-alive renews it while the job runs, and the job's context is
//     cancelled when it is lost. It does NOT stop a replica whose clock is
//     behind by more than the job's run time (and LockAtLeastFor) from
//     running a tick again: that is what run keys are for.
//   - Leader mode (Config.Leader, PostgreSQL): elect a scheduler, let
//     workers compete. The replicas campaign in an election (package
//     elect); the leader enqueues each tick's run as a job of package
//     queue, in one transaction with the tick's row in the run table (INSERT
//     … ON CONFLICT DO NOTHING: the once-ever record, so a tick is enqueued
//     once even across leaders; the queue's unique keys hold only among
//     live jobs) and with a check of its term token against the election's
//     fence (a deposed leader enqueues nothing once a newer term has).
//     Workers — the queue.Clients of any replicas, with the scheduler's
//     worker (Scheduler.AddWorker) — compete for the runs with FOR UPDATE
//     SKIP LOCKED; a run whose worker crashed or paused past its lease is
//     reclaimed by the queue's reaper with a greater token and run again
//     (up to Job.MaxAttempts); the worker records the outcome in the run
//     table in one transaction with the job's fenced completion. A new
//     leader goes on from the last tick enqueued (earlier ones follow the
//     misfire policy). Overlap forbid is one live job per job (the queue's
//     unique key is the job's name); allow keys each tick's job by its fire
//     time; replace is not supported.
//
// In every mode the job's context carries the run and its fencing token
// (TokenFrom): every write of the job goes through the fence with it. The
// scheduler does not make a job's side effects exactly-once; the token and
// the store of record's check do.
//
// The store, the catalog and the run reader are built from a pgx pool
// (NewStoreFromPool, NewCatalogFromPool, NewRunReaderFromPool), the pool
// a program's fence, queue and leases use, or from a *sql.DB for SQLite
// (NewStore, NewCatalog, NewRunReader). The pool stays the program's;
// their Close ends what they opened over it.
//
// Misfires (ticks older than the starting deadline: the scheduler was down,
// paused, or its clock jumped) follow Job.Misfire; overlapping runs follow
// Job.Overlap. A store outage fails closed: no run starts without its row
// or lease; the claim is retried until the tick's starting deadline.
package schedule
