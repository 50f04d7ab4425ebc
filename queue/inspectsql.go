package queue

// The Inspector's statements: what an operator reads of the queue's tables
// (aegis console's queue pages, and the metrics counted at scrape time), in
// database time. They read only; none
// is on a hot path (the counts scan the tables, bounded by what the queue
// keeps: live jobs, and the finished ones of the retention periods).
const (
	// queueCountsSQL counts jobs per queue and state: the live ones with
	// those waiting for a retry and those past their lease, then the
	// finished ones.
	queueCountsSQL = `SELECT queue, state, count(*),
	count(*) FILTER (WHERE state = 'scheduled' AND attempt > 0),
	count(*) FILTER (WHERE state = 'running' AND locked_until < now())
FROM aegis_job GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*), 0, 0 FROM aegis_job_finished GROUP BY queue, state`
	queuePausedSQL = `SELECT name FROM aegis_queue WHERE paused`
	// metricsJobsSQL is the metrics' scrape (metrics.go): the live jobs per
	// queue, kind and state, with the age of the oldest available one per
	// queue and kind (from its due time, database time; NULL on the other
	// states), then the dead letters per queue and kind. A scrape scans
	// the live jobs and the dead letters kept (the heap, for their kind).
	metricsJobsSQL = `SELECT queue, kind, state, count(*),
	CASE WHEN state = 'available' THEN greatest(0, extract(epoch FROM now() - min(run_at)))::float8 END
FROM aegis_job GROUP BY queue, kind, state
UNION ALL
SELECT queue, kind, 'dead', count(*), NULL FROM aegis_job_finished WHERE state <> 'completed' GROUP BY queue, kind`
	// queueHourSQL counts the jobs finished in the last hour.
	queueHourSQL = `SELECT queue, count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state <> 'completed')
FROM aegis_job_finished WHERE finalized_at >= now() - interval '1 hour' GROUP BY queue`
	// queueWaitSQL measures, per queue, how long the jobs started in the
	// last hour waited from due (run_at) to start (attempted_at): the
	// running ones and the finished ones that ended while running
	// (locked_by kept). Their run_at is the due of their last start, as no
	// write but a claim touches a running job's run_at. A job handed back
	// after its last start (a retry, a snooze, a reclaim, a hand-back: its
	// run_at moved, locked_by cleared) and then cancelled is no sample. No
	// comparison of run_at with attempted_at decides a sample: a claim's
	// now() (its transaction's start) can precede the now() of an enqueue
	// that committed before the claim's snapshot, by as long as the claiming
	// backend waited for a core (the test that counts samples lost one so
	// on a loaded machine, with 1ms of slack). Such a wait counts as 0.
	queueWaitSQL = `SELECT queue, count(*),
	percentile_cont(0.5) WITHIN GROUP (ORDER BY w), percentile_cont(0.95) WITHIN GROUP (ORDER BY w)
FROM (
	SELECT queue, greatest(0, extract(epoch FROM attempted_at - run_at))::float8 AS w FROM aegis_job
	WHERE state = 'running' AND attempted_at >= now() - interval '1 hour'
	UNION ALL
	SELECT queue, greatest(0, extract(epoch FROM attempted_at - run_at))::float8 FROM aegis_job_finished
	WHERE finalized_at >= now() - interval '1 hour' -- the index: a job started in the hour finished in it
	  AND attempted_at >= now() - interval '1 hour' AND locked_by IS NOT NULL
) s GROUP BY queue`
	// queueMinutesSQL counts the last hour's completions per queue and
	// minute (0: the current one).
	queueMinutesSQL = `SELECT queue, least(59, floor(extract(epoch FROM now() - finalized_at) / 60))::int, count(*)
FROM aegis_job_finished WHERE state = 'completed' AND finalized_at >= now() - interval '1 hour' GROUP BY 1, 2`
	queueKeepsCompletedSQL = `SELECT EXISTS (SELECT 1 FROM aegis_job_finished WHERE state = 'completed')`

	// jobLineLive and jobLineFinished are the columns of a JobSummary.
	jobLineLive = `id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, locked_until, NULL::timestamptz, left(coalesce(errors->-1->>'error', ''), 300), jsonb_array_length(errors)`
	jobLineFinished = `id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, NULL::timestamptz, finalized_at, left(coalesce(errors->-1->>'error', ''), 300), jsonb_array_length(errors)`
	// queueStuckSQL lists the running jobs past their lease, of queue $1
	// ('' for every queue).
	queueStuckSQL = `SELECT ` + jobLineLive + ` FROM aegis_job WHERE state = 'running' AND locked_until < now()
	AND ($1 = '' OR queue = $1) ORDER BY locked_until, id LIMIT $2`
	// queueOverdueSQL lists the overdue jobs of queue $1 ('' for every
	// queue): waiting (available, or scheduled and not promoted) and due
	// more than $2 µs ago, in a queue that is not paused (a paused queue's
	// wait is its operator's).
	queueOverdueSQL = `SELECT ` + jobLineLive + ` FROM aegis_job j WHERE state IN ('available', 'scheduled')
	AND run_at < now() - $2::bigint * interval '1 microsecond' AND ($1 = '' OR queue = $1)
	AND NOT EXISTS (SELECT 1 FROM aegis_queue q WHERE q.name = j.queue AND q.paused)
	ORDER BY run_at, id LIMIT $3`
	queueDeadSQL  = `SELECT ` + jobLineFinished + ` FROM aegis_job_finished WHERE state <> 'completed' ORDER BY finalized_at DESC, id DESC LIMIT $1`
	queueLiveSQL  = `SELECT ` + jobLineLive + ` FROM aegis_job WHERE queue = $1 AND state = $2 ORDER BY id DESC LIMIT $3`
	queueEndedSQL = `SELECT ` + jobLineFinished + ` FROM aegis_job_finished WHERE queue = $1 AND state = $2 ORDER BY id DESC LIMIT $3`

	// queueHealthSQL counts, in one round trip, the stuck jobs, the
	// overdue ones (grace $1 µs, as queueOverdueSQL) and the dead letters
	// of the last hour and day. Each count stops at $2 rows, so that a
	// huge backlog costs a bounded scan.
	queueHealthSQL = `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM aegis_job WHERE state = 'running' AND locked_until < now() LIMIT $2) s),
	(SELECT count(*) FROM (SELECT 1 FROM aegis_job j WHERE state IN ('available', 'scheduled')
		AND run_at < now() - $1::bigint * interval '1 microsecond'
		AND NOT EXISTS (SELECT 1 FROM aegis_queue q WHERE q.name = j.queue AND q.paused) LIMIT $2) s),
	(SELECT count(*) FROM (SELECT 1 FROM aegis_job_finished WHERE state <> 'completed'
		AND finalized_at >= now() - interval '1 hour' LIMIT $2) s),
	(SELECT count(*) FROM (SELECT 1 FROM aegis_job_finished WHERE state <> 'completed'
		AND finalized_at >= now() - interval '1 day' LIMIT $2) s)`
	// queueOldestSQL reads each queue's oldest waiting job (available, or
	// scheduled and due: a promotion away), the longest waiting first, at
	// most $1 queues, with what tells whether a worker takes the queue's
	// jobs: its running jobs whose lease is current (a live client renews
	// them), and its latest start (a running job's, or one of a job
	// finished in the last hour: the index on finalized_at bounds it).
	queueOldestSQL = `SELECT w.queue, w.id, w.run_at, greatest(0, extract(epoch FROM now() - w.run_at))::float8,
	EXISTS (SELECT 1 FROM aegis_queue q WHERE q.name = w.queue AND q.paused),
	(SELECT count(*) FROM aegis_job r WHERE r.state = 'running' AND r.queue = w.queue AND r.locked_until >= now()),
	greatest((SELECT max(attempted_at) FROM aegis_job r WHERE r.state = 'running' AND r.queue = w.queue),
		(SELECT max(attempted_at) FROM aegis_job_finished f WHERE f.queue = w.queue
			AND f.finalized_at >= now() - interval '1 hour' AND f.attempted_at >= now() - interval '1 hour'))
FROM (
	SELECT DISTINCT ON (queue) queue, id, run_at FROM aegis_job
	WHERE state = 'available' OR (state = 'scheduled' AND run_at <= now())
	ORDER BY queue, run_at, id
) w ORDER BY w.run_at, w.queue LIMIT $1`

	// jobDetailSQL reads one job, live or finished, with its args ($2
	// characters of their text) and its errors (the latest $3) bounded,
	// and whether it is past its lease.
	jobDetailSQL = `SELECT id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, locked_until, NULL::timestamptz, priority, coalesce(unique_key, ''),
	left(args::text, $2), length(args::text), created_at, jsonb_array_length(errors),
	(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]') FROM jsonb_array_elements(errors) WITH ORDINALITY AS x(e, n)
	 WHERE n > jsonb_array_length(errors) - $3), locked_until < now()
FROM aegis_job WHERE id = $1
UNION ALL
SELECT id, queue, kind, state, attempt, max_attempts, token, coalesce(locked_by, ''),
	run_at, attempted_at, NULL::timestamptz, finalized_at, priority, coalesce(unique_key, ''),
	left(args::text, $2), length(args::text), created_at, jsonb_array_length(errors),
	(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]') FROM jsonb_array_elements(errors) WITH ORDINALITY AS x(e, n)
	 WHERE n > jsonb_array_length(errors) - $3), false
FROM aegis_job_finished WHERE id = $1`
)
