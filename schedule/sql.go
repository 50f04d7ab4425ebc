package schedule

import "github.com/aegislab/aegis/internal/migrate"

// The run table's statements, per dialect. Every time is passed and read
// as milliseconds since the Unix epoch; expiry is computed by the store
// (now() in PostgreSQL, SQLite's own clock), never from a client clock.
// Each statement is one round trip that resolves the run by its key (job,
// fire time) or scans one job's running rows through the partial index.
// %[1]s is the quoted table, %[2]s the quoted name of its first index;
// the migrations also use %[3]s (its first primary key's name), %[4]s (the
// namespaced index), %[5]s (the first index, schema-qualified), %[6]s (a
// scratch table, schema-qualified) and %[7]s (the table's unqualified
// name).
type runSQL struct {
	migrations                                 []migrate.Migration
	claim, replace, heartbeat, finish, expired string
	handBack                                   string
	// A claim or reclaim, and a finish, whose reply was lost read back
	// what they may have written.
	mine, ended                         string
	reclaim, last, prune, list, abandon string
	// Leader mode (PostgreSQL only).
	enqueue, skip, record string
	// The attempt history and the missed ticks (%[1]s the run table,
	// %[2]s the missed table, %[3]s the attempt table): refuse, miss,
	// lastRecorded, pruneAttempts, pruneMissed.
	refuse, miss, lastRecorded, pruneAttempts, pruneMissed string
	// Leader mode: a worker's attempt whose outcome the run row refused
	// (its claim was taken over) is recorded on its own.
	takenOver string
	// An attempt's trace id, when its scheduler traces.
	traced string
}

var runPostgres = runSQL{
	migrations: []migrate.Migration{
		{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	job        text        NOT NULL,
	fire_at    timestamptz NOT NULL, -- the scheduled fire time; (job, fire_at) is the run key
	token      bigint      NOT NULL, -- fences the run's writes; bumped by reclaim and replace
	node       text        NOT NULL, -- the node running (or that ran) the last attempt
	attempt    integer     NOT NULL,
	state      text        NOT NULL, -- running, succeeded, failed, skipped, replaced, abandoned
	started_at timestamptz NOT NULL,
	ended_at   timestamptz,
	expires_at timestamptz NOT NULL, -- a running row past this is the reaper's
	error      text,
	PRIMARY KEY (job, fire_at)
)`},
		{Version: 2, SQL: `CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (job, expires_at) WHERE state = 'running'`},
		// Namespaces: two services on one database keep their runs apart.
		// The run key becomes (namespace, job, fire time).
		{Version: 3, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT 'default'`},
		{Version: 4, SQL: `ALTER TABLE %[1]s DROP CONSTRAINT IF EXISTS %[3]s`},
		{Version: 5, SQL: `ALTER TABLE %[1]s ADD PRIMARY KEY (namespace, job, fire_at)`},
		{Version: 6, SQL: `DROP INDEX IF EXISTS %[5]s`},
		{Version: 7, SQL: `CREATE INDEX IF NOT EXISTS %[4]s ON %[1]s (namespace, job, expires_at) WHERE state = 'running'`},
		// The attempt history: a row per attempt of a tick, kept by the
		// trigger below in the transaction of every write of a run row.
		{Version: 8, SQL: `CREATE TABLE IF NOT EXISTS %[8]s (
	namespace  text        NOT NULL,
	job        text        NOT NULL,
	fire_at    timestamptz NOT NULL,
	token      bigint      NOT NULL, -- the attempt's token, as claimed (a replace or abandon bumps the run row's, not this)
	attempt    integer     NOT NULL, -- 1 for the claim, +1 per reclaim; 0 for a leader's enqueue
	node       text        NOT NULL,
	outcome    text        NOT NULL, -- running, succeeded, failed, skipped, replaced, abandoned, enqueued, lost, refused
	claimed_at timestamptz NOT NULL, -- the claim, which starts the run
	ended_at   timestamptz,
	error      text,
	PRIMARY KEY (namespace, job, fire_at, token)
)`},
		{Version: 9, SQL: `CREATE OR REPLACE FUNCTION %[11]s"%[12]s_attempt"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'UPDATE' AND OLD.attempt = NEW.attempt THEN
		-- The same attempt ended (finish, replace, abandon, skip): its row says how.
		UPDATE %[8]s SET outcome = NEW.state, ended_at = NEW.ended_at, error = NEW.error
		WHERE namespace = OLD.namespace AND job = OLD.job AND fire_at = OLD.fire_at AND token = OLD.token;
		RETURN NULL;
	END IF;
	IF TG_OP = 'UPDATE' THEN
		-- A new attempt (a reclaim, a leader-mode worker's outcome): the one
		-- it took over from is lost if it was still running.
		UPDATE %[8]s SET outcome = CASE outcome WHEN 'running' THEN 'lost' ELSE outcome END,
		       ended_at = coalesce(ended_at, NEW.started_at),
		       error = CASE outcome WHEN 'running' THEN 'its run row expired: attempt ' || NEW.attempt || ' on ' || NEW.node || ' took the tick' ELSE error END
		WHERE namespace = OLD.namespace AND job = OLD.job AND fire_at = OLD.fire_at AND token = OLD.token;
	END IF;
	INSERT INTO %[8]s (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, error)
	VALUES (NEW.namespace, NEW.job, NEW.fire_at, NEW.token, NEW.attempt, NEW.node, NEW.state, NEW.started_at, NEW.ended_at, NEW.error)
	ON CONFLICT DO NOTHING;
	RETURN NULL;
END
$$`},
		{Version: 10, SQL: `CREATE TRIGGER "%[12]s_attempt" AFTER INSERT OR UPDATE OF token, attempt, state ON %[1]s
FOR EACH ROW EXECUTE FUNCTION %[11]s"%[12]s_attempt"()`},
		// The runs recorded before the history: one attempt each, their last.
		{Version: 11, SQL: `INSERT INTO %[8]s (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, error)
SELECT namespace, job, fire_at, token, attempt, node, state, started_at, ended_at, error FROM %[1]s
ON CONFLICT DO NOTHING`},
		// Missed ticks: a tick no replica started by its starting deadline,
		// once (the first replica to see it records it), with its cause.
		{Version: 12, SQL: `CREATE TABLE IF NOT EXISTS %[9]s (
	namespace   text        NOT NULL,
	job         text        NOT NULL,
	fire_at     timestamptz NOT NULL,
	cause       text        NOT NULL, -- held, unbound, paused, misfire, store, down
	detail      text        NOT NULL,
	node        text        NOT NULL, -- the replica that recorded it
	recorded_at timestamptz NOT NULL,
	PRIMARY KEY (namespace, job, fire_at)
)`},
		// The trace of an attempt's run, when its scheduler traces.
		{Version: 13, SQL: `ALTER TABLE %[8]s ADD COLUMN IF NOT EXISTS trace_id text`},
		// The owner of the run row's grant: random per claim and reclaim,
		// so that a claim whose reply was lost finds the row it took (mine).
		{Version: 14, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS owner text`},
		// The operator's counts of the last hour and day (RunReader.Counts,
		// FindAttempts) find by claim time the ticks that can have run or
		// been applied twice: those with a second attempt. Partial, so that
		// the claims of the ticks that ran once write no more.
		{Version: 15, SQL: `CREATE INDEX IF NOT EXISTS "%[12]s_attempt_twice" ON %[8]s (namespace, claimed_at) WHERE attempt >= 2 OR outcome IN ('lost', 'refused')`},
	},
	// $1 job, $2 fire ms, $3 token, $4 node, $5 ttl ms, $6 forbid overlap,
	// $7 namespace, $8 owner.
	claim: `INSERT INTO %[1]s (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at, owner)
SELECT $7, $1, timestamptz 'epoch' + $2 * interval '1 millisecond', $3, $4, 1,
       CASE WHEN $6::boolean AND EXISTS ( -- overlap forbid: a live run of the job
           SELECT 1 FROM %[1]s WHERE namespace = $7 AND job = $1 AND state = 'running' AND expires_at > now())
       THEN 'skipped' ELSE 'running' END,
       now(), now() + $5 * interval '1 millisecond', $8
ON CONFLICT (namespace, job, fire_at) DO NOTHING -- the run key: the first insert runs the tick
RETURNING token, state`,
	// $1 namespace, $2 job, $3 fire ms, $4 owner: the row a claim or
	// reclaim of this owner took, if it did.
	mine: `SELECT token, state, attempt FROM %[1]s
WHERE namespace = $1 AND job = $2 AND fire_at = timestamptz 'epoch' + $3 * interval '1 millisecond' AND owner = $4`,
	// $1 namespace, $2 job, $3 fire ms: what a finish that a later try
	// found refused may have written.
	ended: `SELECT token, state, coalesce(error, '') FROM %[1]s
WHERE namespace = $1 AND job = $2 AND fire_at = timestamptz 'epoch' + $3 * interval '1 millisecond'`,
	// $1 job, $2 fire ms of the new run, $3 namespace.
	replace: `UPDATE %[1]s SET state = 'replaced', ended_at = now(), token = token + 1 -- fence the predecessor
WHERE namespace = $3 AND job = $1 AND state = 'running' AND fire_at < timestamptz 'epoch' + $2 * interval '1 millisecond'`,
	// $1 job, $2 fire ms, $3 token, $4 ttl ms, $5 namespace.
	heartbeat: `UPDATE %[1]s SET expires_at = now() + $4 * interval '1 millisecond'
WHERE namespace = $5 AND job = $1 AND fire_at = timestamptz 'epoch' + $2 * interval '1 millisecond'
  AND token = $3 AND state = 'running' -- fence
  AND expires_at > now()               -- an expired run is the reaper's: no revival`,
	// $1 job, $2 fire ms, $3 token, $4 state, $5 error, $6 namespace.
	finish: `UPDATE %[1]s SET state = $4, ended_at = now(), error = $5
WHERE namespace = $6 AND job = $1 AND fire_at = timestamptz 'epoch' + $2 * interval '1 millisecond'
  AND token = $3 AND state = 'running' -- fence: a reclaimed or replaced run's finish changes nothing`,
	// $1 job, $2 fire ms, $3 token, $4 namespace: a run claimed while its
	// node stops.
	handBack: `UPDATE %[1]s SET expires_at = now() -- the reaper's at once
WHERE namespace = $4 AND job = $1 AND fire_at = timestamptz 'epoch' + $2 * interval '1 millisecond'
  AND token = $3 AND state = 'running' -- fence`,
	// $1 the jobs (text[]), $2 namespace: one statement per reaper pass,
	// however many jobs.
	expired: `SELECT job, (extract(epoch FROM fire_at) * 1000)::bigint FROM %[1]s
WHERE namespace = $2 AND job = ANY($1) AND state = 'running' AND expires_at <= now() ORDER BY fire_at LIMIT 100`,
	// $1 the jobs (text[]), $2 namespace: the crashed runs of paused or
	// deleted catalog schedules end abandoned, their token bumped.
	abandon: `UPDATE %[1]s SET state = 'abandoned', ended_at = now(), token = token + 1
WHERE namespace = $2 AND job = ANY($1) AND state = 'running' AND expires_at <= now()`,
	// $1 job, $2 fire ms, $3 node, $4 ttl ms, $5 max attempts, $6 namespace,
	// $7 owner.
	reclaim: `UPDATE %[1]s AS r SET
	token = r.token + 1, -- in the statement that reclaims: the crashed runner is fenced
	node = $3,
	owner = $7,
	attempt = r.attempt + 1,
	started_at = now(),
	expires_at = now() + $4 * interval '1 millisecond',
	state = CASE WHEN r.attempt >= $5 OR EXISTS (SELECT 1 FROM %[1]s l WHERE l.namespace = r.namespace AND l.job = r.job AND l.fire_at > r.fire_at)
	        THEN 'abandoned' ELSE 'running' END,
	ended_at = CASE WHEN r.attempt >= $5 OR EXISTS (SELECT 1 FROM %[1]s l WHERE l.namespace = r.namespace AND l.job = r.job AND l.fire_at > r.fire_at)
	           THEN now() END
WHERE r.namespace = $6 AND r.job = $1 AND r.fire_at = timestamptz 'epoch' + $2 * interval '1 millisecond'
  AND r.state = 'running'
  AND r.expires_at <= now() -- re-check expiry at write time: a renewed run is left alone
RETURNING r.token, r.state, r.attempt`,
	// $1 job, $2 namespace (last); $1 job, $2 cutoff ms, $3 namespace (prune);
	// $1 job, $2 limit, $3 namespace (list).
	last:  `SELECT (extract(epoch FROM max(fire_at)) * 1000)::bigint FROM %[1]s WHERE namespace = $2 AND job = $1`,
	prune: `DELETE FROM %[1]s WHERE namespace = $3 AND job = $1 AND fire_at < timestamptz 'epoch' + $2 * interval '1 millisecond' AND state <> 'running'`,
	list: `SELECT (extract(epoch FROM fire_at) * 1000)::bigint, token, node, attempt, state,
       (extract(epoch FROM started_at) * 1000)::bigint, coalesce((extract(epoch FROM ended_at) * 1000)::bigint, 0), coalesce(error, '')
FROM %[1]s WHERE namespace = $3 AND job = $1 ORDER BY fire_at DESC LIMIT $2`,

	// Leader mode. The leader inserts the tick's row in the transaction
	// that enqueues its job: the run key is the once-ever record, so a
	// tick is enqueued once even across leaders (the queue's unique keys
	// hold only among live jobs). $1 job, $2 fire ms, $3 token (the
	// tick's base: every claim's run token is greater), $4 leader node,
	// $5 namespace.
	enqueue: `INSERT INTO %[1]s (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at)
VALUES ($5, $1, timestamptz 'epoch' + $2 * interval '1 millisecond', $3, $4, 0, 'enqueued', now(), now())
ON CONFLICT (namespace, job, fire_at) DO NOTHING -- the run key: a tick is enqueued once, ever`,
	// $1 job, $2 fire ms, $3 namespace: overlap forbid found a live job of
	// the job (or the catalog refused the tick).
	skip: `UPDATE %[1]s SET state = 'skipped', ended_at = now()
WHERE namespace = $3 AND job = $1 AND fire_at = timestamptz 'epoch' + $2 * interval '1 millisecond' AND state = 'enqueued'`,
	// A worker records a run's outcome. $1 job, $2 fire ms, $3 the claim's
	// run token, $4 worker node, $5 attempt, $6 state, $7 started (the
	// claim's time, database time), $8 error, $9 namespace.
	record: `UPDATE %[1]s SET token = $3, node = $4, attempt = $5, state = $6, started_at = $7, ended_at = now(), error = $8
WHERE namespace = $9 AND job = $1 AND fire_at = timestamptz 'epoch' + $2 * interval '1 millisecond'
  AND token < $3 -- fence: an earlier claim's outcome never overwrites a later claim's`,

	// A run whose finish the run row refused (a later attempt took the
	// tick while it went on) records its end on its own attempt, which
	// the reclaim marked lost. $1 namespace, $2 job, $3 fire ms, $4 its
	// token, $5 the text.
	refuse: `UPDATE %[3]s SET outcome = 'refused', ended_at = now(), error = $5
WHERE namespace = $1 AND job = $2 AND fire_at = timestamptz 'epoch' + $3 * interval '1 millisecond' AND token = $4 AND outcome = 'lost'`,
	// Ticks past their starting deadline that no replica started, recorded
	// once: a tick with a run row is no miss, unless overlap forbid
	// skipped it (the key was held). $1 namespace, $2 job, $3 node, $4 the
	// ticks as a JSON array of {"f": fire ms, "c": cause, "d": detail}.
	miss: `INSERT INTO %[2]s (namespace, job, fire_at, cause, detail, node, recorded_at)
SELECT $1, $2, timestamptz 'epoch' + t.f * interval '1 millisecond',
       CASE WHEN r.state = 'skipped' THEN 'held' ELSE t.c END,
       CASE WHEN r.state = 'skipped' THEN 'skipped by ' || r.node || ': a run of an earlier tick was still going (overlap forbid)' ELSE t.d END,
       $3, now()
FROM jsonb_to_recordset($4::jsonb) AS t(f bigint, c text, d text)
LEFT JOIN %[1]s r ON r.namespace = $1 AND r.job = $2 AND r.fire_at = timestamptz 'epoch' + t.f * interval '1 millisecond'
WHERE r.job IS NULL OR r.state = 'skipped'
ON CONFLICT (namespace, job, fire_at) DO NOTHING -- the tick's key: recorded once, by the first to see it
RETURNING (extract(epoch FROM fire_at) * 1000)::bigint, cause, detail`,
	// $1 namespace, $2 job, $3 fire ms, $4 the claim's run token, $5
	// attempt, $6 worker node, $7 outcome (lost, refused), $8 the claim's
	// time, $9 error.
	takenOver: `INSERT INTO %[3]s (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, error)
VALUES ($1, $2, timestamptz 'epoch' + $3 * interval '1 millisecond', $4, $5, $6, $7, $8, now(), $9)
ON CONFLICT DO NOTHING`,
	// $1 namespace, $2 job, $3 fire ms, $4 token, $5 trace id.
	traced: `UPDATE %[3]s SET trace_id = $5
WHERE namespace = $1 AND job = $2 AND fire_at = timestamptz 'epoch' + $3 * interval '1 millisecond' AND token = $4`,
	// $1 namespace, $2 job, $3 ms: the latest tick on record before $3,
	// run or missed.
	lastRecorded: `SELECT (extract(epoch FROM max(f)) * 1000)::bigint FROM (
	SELECT max(fire_at) AS f FROM %[1]s WHERE namespace = $1 AND job = $2 AND fire_at < timestamptz 'epoch' + $3 * interval '1 millisecond'
	UNION ALL SELECT max(fire_at) FROM %[2]s WHERE namespace = $1 AND job = $2 AND fire_at < timestamptz 'epoch' + $3 * interval '1 millisecond') AS t`,
	// $1 namespace, $2 job, $3 cutoff ms.
	pruneAttempts: `DELETE FROM %[3]s WHERE namespace = $1 AND job = $2 AND fire_at < timestamptz 'epoch' + $3 * interval '1 millisecond' AND outcome <> 'running'`,
	pruneMissed:   `DELETE FROM %[2]s WHERE namespace = $1 AND job = $2 AND fire_at < timestamptz 'epoch' + $3 * interval '1 millisecond'`,
}

const sqliteNow = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

var runSQLite = runSQL{
	migrations: []migrate.Migration{
		{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	job        TEXT    NOT NULL,
	fire_ms    INTEGER NOT NULL,
	token      INTEGER NOT NULL,
	node       TEXT    NOT NULL,
	attempt    INTEGER NOT NULL,
	state      TEXT    NOT NULL,
	started_ms INTEGER NOT NULL,
	ended_ms   INTEGER,
	expires_ms INTEGER NOT NULL,
	error      TEXT,
	PRIMARY KEY (job, fire_ms)
) WITHOUT ROWID`},
		{Version: 2, SQL: `CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (job, expires_ms) WHERE state = 'running'`},
		// Namespaces (see runPostgres): SQLite cannot change a primary key,
		// so the table is rebuilt.
		{Version: 3, SQL: `CREATE TABLE %[6]s (
	namespace  TEXT    NOT NULL,
	job        TEXT    NOT NULL,
	fire_ms    INTEGER NOT NULL,
	token      INTEGER NOT NULL,
	node       TEXT    NOT NULL,
	attempt    INTEGER NOT NULL,
	state      TEXT    NOT NULL,
	started_ms INTEGER NOT NULL,
	ended_ms   INTEGER,
	expires_ms INTEGER NOT NULL,
	error      TEXT,
	PRIMARY KEY (namespace, job, fire_ms)
) WITHOUT ROWID`},
		{Version: 4, SQL: `INSERT INTO %[6]s (namespace, job, fire_ms, token, node, attempt, state, started_ms, ended_ms, expires_ms, error)
SELECT 'default', job, fire_ms, token, node, attempt, state, started_ms, ended_ms, expires_ms, error FROM %[1]s`},
		{Version: 5, SQL: `DROP TABLE %[1]s`},
		{Version: 6, SQL: `ALTER TABLE %[6]s RENAME TO %[7]s`},
		{Version: 7, SQL: `CREATE INDEX IF NOT EXISTS %[4]s ON %[1]s (namespace, job, expires_ms) WHERE state = 'running'`},
		// The attempt history and its triggers (see runPostgres). A
		// trigger's body names its tables unqualified: they are in its
		// table's schema.
		{Version: 8, SQL: `CREATE TABLE IF NOT EXISTS %[8]s (
	namespace  TEXT    NOT NULL,
	job        TEXT    NOT NULL,
	fire_ms    INTEGER NOT NULL,
	token      INTEGER NOT NULL,
	attempt    INTEGER NOT NULL,
	node       TEXT    NOT NULL,
	outcome    TEXT    NOT NULL,
	claimed_ms INTEGER NOT NULL,
	ended_ms   INTEGER,
	error      TEXT,
	PRIMARY KEY (namespace, job, fire_ms, token)
) WITHOUT ROWID`},
		{Version: 9, SQL: `CREATE TRIGGER IF NOT EXISTS %[11]s"%[12]s_attempt_insert" AFTER INSERT ON %[7]s BEGIN
	INSERT OR IGNORE INTO %[10]s (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, error)
	VALUES (NEW.namespace, NEW.job, NEW.fire_ms, NEW.token, NEW.attempt, NEW.node, NEW.state, NEW.started_ms, NEW.ended_ms, NEW.error);
END`},
		{Version: 10, SQL: `CREATE TRIGGER IF NOT EXISTS %[11]s"%[12]s_attempt_end" AFTER UPDATE OF token, attempt, state ON %[7]s
WHEN OLD.attempt = NEW.attempt BEGIN
	UPDATE %[10]s SET outcome = NEW.state, ended_ms = NEW.ended_ms, error = NEW.error
	WHERE namespace = OLD.namespace AND job = OLD.job AND fire_ms = OLD.fire_ms AND token = OLD.token;
END`},
		{Version: 11, SQL: `CREATE TRIGGER IF NOT EXISTS %[11]s"%[12]s_attempt_next" AFTER UPDATE OF token, attempt, state ON %[7]s
WHEN OLD.attempt <> NEW.attempt BEGIN
	UPDATE %[10]s SET outcome = CASE outcome WHEN 'running' THEN 'lost' ELSE outcome END,
	       ended_ms = coalesce(ended_ms, NEW.started_ms),
	       error = CASE outcome WHEN 'running' THEN 'its run row expired: attempt ' || NEW.attempt || ' on ' || NEW.node || ' took the tick' ELSE error END
	WHERE namespace = OLD.namespace AND job = OLD.job AND fire_ms = OLD.fire_ms AND token = OLD.token;
	INSERT OR IGNORE INTO %[10]s (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, error)
	VALUES (NEW.namespace, NEW.job, NEW.fire_ms, NEW.token, NEW.attempt, NEW.node, NEW.state, NEW.started_ms, NEW.ended_ms, NEW.error);
END`},
		{Version: 12, SQL: `INSERT OR IGNORE INTO %[8]s (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, error)
SELECT namespace, job, fire_ms, token, attempt, node, state, started_ms, ended_ms, error FROM %[1]s`},
		{Version: 13, SQL: `CREATE TABLE IF NOT EXISTS %[9]s (
	namespace   TEXT    NOT NULL,
	job         TEXT    NOT NULL,
	fire_ms     INTEGER NOT NULL,
	cause       TEXT    NOT NULL,
	detail      TEXT    NOT NULL,
	node        TEXT    NOT NULL,
	recorded_ms INTEGER NOT NULL,
	PRIMARY KEY (namespace, job, fire_ms)
) WITHOUT ROWID`},
		{Version: 14, SQL: `ALTER TABLE %[8]s ADD COLUMN trace_id TEXT`},
		{Version: 15, SQL: `ALTER TABLE %[1]s ADD COLUMN owner TEXT`},
		{Version: 16, SQL: `CREATE INDEX IF NOT EXISTS %[11]s"%[12]s_attempt_twice" ON %[10]s (namespace, claimed_ms) WHERE attempt >= 2 OR outcome IN ('lost', 'refused')`},
	},
	claim: `INSERT INTO %[1]s (namespace, job, fire_ms, token, node, attempt, state, started_ms, expires_ms, owner)
SELECT $7, $1, $2, $3, $4, 1,
       CASE WHEN $6 AND EXISTS (
           SELECT 1 FROM %[1]s WHERE namespace = $7 AND job = $1 AND state = 'running' AND expires_ms > ` + sqliteNow + `)
       THEN 'skipped' ELSE 'running' END,
       ` + sqliteNow + `, ` + sqliteNow + ` + $5, $8
WHERE true -- (SQLite needs a WHERE before ON CONFLICT in INSERT … SELECT)
ON CONFLICT (namespace, job, fire_ms) DO NOTHING
RETURNING token, state`,
	replace: `UPDATE %[1]s SET state = 'replaced', ended_ms = ` + sqliteNow + `, token = token + 1
WHERE namespace = $3 AND job = $1 AND state = 'running' AND fire_ms < $2`,
	heartbeat: `UPDATE %[1]s SET expires_ms = ` + sqliteNow + ` + $4
WHERE namespace = $5 AND job = $1 AND fire_ms = $2 AND token = $3 AND state = 'running' AND expires_ms > ` + sqliteNow,
	finish: `UPDATE %[1]s SET state = $4, ended_ms = ` + sqliteNow + `, error = $5
WHERE namespace = $6 AND job = $1 AND fire_ms = $2 AND token = $3 AND state = 'running'`,
	handBack: `UPDATE %[1]s SET expires_ms = ` + sqliteNow + `
WHERE namespace = $4 AND job = $1 AND fire_ms = $2 AND token = $3 AND state = 'running'`,
	// $1 the jobs (a JSON array), $2 namespace.
	expired: `SELECT job, fire_ms FROM %[1]s
WHERE namespace = $2 AND job IN (SELECT value FROM json_each($1)) AND state = 'running' AND expires_ms <= ` + sqliteNow + ` ORDER BY fire_ms LIMIT 100`,
	mine:  `SELECT token, state, attempt FROM %[1]s WHERE namespace = $1 AND job = $2 AND fire_ms = $3 AND owner = $4`,
	ended: `SELECT token, state, coalesce(error, '') FROM %[1]s WHERE namespace = $1 AND job = $2 AND fire_ms = $3`,
	reclaim: `UPDATE %[1]s AS r SET
	token = r.token + 1,
	node = $3,
	owner = $7,
	attempt = r.attempt + 1,
	started_ms = ` + sqliteNow + `,
	expires_ms = ` + sqliteNow + ` + $4,
	state = CASE WHEN r.attempt >= $5 OR EXISTS (SELECT 1 FROM %[1]s l WHERE l.namespace = r.namespace AND l.job = r.job AND l.fire_ms > r.fire_ms)
	        THEN 'abandoned' ELSE 'running' END,
	ended_ms = CASE WHEN r.attempt >= $5 OR EXISTS (SELECT 1 FROM %[1]s l WHERE l.namespace = r.namespace AND l.job = r.job AND l.fire_ms > r.fire_ms)
	           THEN ` + sqliteNow + ` END
WHERE r.namespace = $6 AND r.job = $1 AND r.fire_ms = $2 AND r.state = 'running' AND r.expires_ms <= ` + sqliteNow + `
RETURNING token, state, attempt`,
	abandon: `UPDATE %[1]s SET state = 'abandoned', ended_ms = ` + sqliteNow + `, token = token + 1
WHERE namespace = $2 AND job IN (SELECT value FROM json_each($1)) AND state = 'running' AND expires_ms <= ` + sqliteNow,
	last:  `SELECT max(fire_ms) FROM %[1]s WHERE namespace = $2 AND job = $1`,
	prune: `DELETE FROM %[1]s WHERE namespace = $3 AND job = $1 AND fire_ms < $2 AND state <> 'running'`,
	list: `SELECT fire_ms, token, node, attempt, state, started_ms, coalesce(ended_ms, 0), coalesce(error, '')
FROM %[1]s WHERE namespace = $3 AND job = $1 ORDER BY fire_ms DESC LIMIT $2`,
	refuse: `UPDATE %[3]s SET outcome = 'refused', ended_ms = ` + sqliteNow + `, error = $5
WHERE namespace = $1 AND job = $2 AND fire_ms = $3 AND token = $4 AND outcome = 'lost'`,
	miss: `INSERT INTO %[2]s (namespace, job, fire_ms, cause, detail, node, recorded_ms)
SELECT $1, $2, json_extract(t.value, '$.f'),
       CASE WHEN r.state = 'skipped' THEN 'held' ELSE json_extract(t.value, '$.c') END,
       CASE WHEN r.state = 'skipped' THEN 'skipped by ' || r.node || ': a run of an earlier tick was still going (overlap forbid)' ELSE json_extract(t.value, '$.d') END,
       $3, ` + sqliteNow + `
FROM json_each($4) AS t
LEFT JOIN %[1]s r ON r.namespace = $1 AND r.job = $2 AND r.fire_ms = json_extract(t.value, '$.f')
WHERE r.job IS NULL OR r.state = 'skipped'
ON CONFLICT (namespace, job, fire_ms) DO NOTHING
RETURNING fire_ms, cause, detail`,
	lastRecorded: `SELECT max(f) FROM (
	SELECT max(fire_ms) AS f FROM %[1]s WHERE namespace = $1 AND job = $2 AND fire_ms < $3
	UNION ALL SELECT max(fire_ms) FROM %[2]s WHERE namespace = $1 AND job = $2 AND fire_ms < $3)`,
	traced:        `UPDATE %[3]s SET trace_id = $5 WHERE namespace = $1 AND job = $2 AND fire_ms = $3 AND token = $4`,
	pruneAttempts: `DELETE FROM %[3]s WHERE namespace = $1 AND job = $2 AND fire_ms < $3 AND outcome <> 'running'`,
	pruneMissed:   `DELETE FROM %[2]s WHERE namespace = $1 AND job = $2 AND fire_ms < $3`,
}
