package schedule

import (
	"fmt"

	"github.com/aegislab/aegis/internal/migrate"
)

// The catalog's statements, per dialect. Times are passed and read as ms
// since the Unix epoch; "now" is the store's clock. %[1]s is the quoted
// catalog table, %[2]s its namespaces' change counters, %[3]s the
// replicas' heartbeats.
type catalogSQL struct {
	migrations                         []migrate.Migration
	bump, generation, known            string
	get, list, put, setEnabled, delete string
	replicas, heartbeat, leave         string
	// check is the catalog half of a claim: the row exists, is enabled,
	// fire time $3 is not before its last resume, and follows spec $4 in
	// zone $5 (the new spec from effective_at, the previous one before)
	// or, when $6 (a run now), is the row's latest RunNow. $1 namespace,
	// $2 name. It returns the args and version the run gets.
	check string
	// runNow records a RunNow at $3 (ms) on an enabled row; take is lease
	// mode's claim of the run now at $3: the first replica to take it
	// runs it (the lease alone would let a replica that saw the request
	// after another's run had ended run it again). $1 namespace, $2 name.
	runNow, take string
}

func (q catalogSQL) format(names []any) catalogSQL {
	f := func(s string) string { return fmt.Sprintf(s, names...) }
	return catalogSQL{
		bump: f(q.bump), generation: f(q.generation), known: f(q.known),
		get: f(q.get), list: f(q.list), put: f(q.put), setEnabled: f(q.setEnabled), delete: f(q.delete),
		replicas: f(q.replicas), heartbeat: f(q.heartbeat), leave: f(q.leave), check: f(q.check),
		runNow: f(q.runNow), take: f(q.take),
	}
}

const catalogColumnsPG = `name, spec, tz, prev_spec, prev_tz, (extract(epoch FROM effective_at) * 1000)::bigint,
	(extract(epoch FROM resumed_at) * 1000)::bigint, handler, args::text, enabled,
	misfire, overlap, starting_deadline_ms, catch_up_max, max_attempts, lock_at_most_for_ms, lock_at_least_for_ms, version,
	(extract(epoch FROM created_at) * 1000)::bigint, (extract(epoch FROM updated_at) * 1000)::bigint, keep_alive,
	(extract(epoch FROM run_now_at) * 1000)::bigint, (extract(epoch FROM now()) * 1000)::bigint`

var catalogPostgres = catalogSQL{
	migrations: []migrate.Migration{
		{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	namespace            text        NOT NULL,
	name                 text        NOT NULL,
	spec                 text        NOT NULL, -- cron fields with seconds, or "@every D"
	tz                   text        NOT NULL, -- the cron spec's IANA zone; '' for an interval
	prev_spec            text,                 -- the spec before effective_at (NULL: no ticks before it)
	prev_tz              text,
	effective_at         timestamptz NOT NULL, -- when spec takes effect, the same instant for every replica
	resumed_at           timestamptz NOT NULL, -- the last resume: no tick before it runs (epoch: never paused)
	handler              text        NOT NULL,
	args                 json        NOT NULL,
	enabled              boolean     NOT NULL,
	misfire              text        NOT NULL,
	overlap              text        NOT NULL,
	starting_deadline_ms bigint      NOT NULL, -- 0: the default
	catch_up_max         integer     NOT NULL,
	max_attempts         integer     NOT NULL,
	lock_at_most_for_ms  bigint      NOT NULL,
	lock_at_least_for_ms bigint      NOT NULL,
	version              bigint      NOT NULL, -- the namespace's change counter at the last edit
	created_at           timestamptz NOT NULL,
	updated_at           timestamptz NOT NULL,
	PRIMARY KEY (namespace, name)
)`},
		{Version: 2, SQL: `CREATE TABLE IF NOT EXISTS %[2]s (
	namespace  text        PRIMARY KEY,
	generation bigint      NOT NULL, -- bumped by every edit: what the binders poll
	updated_at timestamptz NOT NULL
)`},
		{Version: 3, SQL: `CREATE TABLE IF NOT EXISTS %[3]s (
	namespace text        NOT NULL,
	node      text        NOT NULL,
	handlers  text        NOT NULL, -- a JSON array of the handler names the replica has
	seen_at   timestamptz NOT NULL,
	PRIMARY KEY (namespace, node)
)`},
		// ShedLock without KeepAliveLockProvider: a run ends at
		// LockAtMostFor, whether it finished or not.
		{Version: 4, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS keep_alive boolean NOT NULL DEFAULT true`},
		// Catalog.RunNow: the fire time of the latest one-off run (NULL:
		// none), and whether a lease-mode replica has taken it.
		{Version: 5, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS run_now_at timestamptz`},
		{Version: 6, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS run_now_taken boolean NOT NULL DEFAULT false`},
	},
	bump: `INSERT INTO %[2]s AS n (namespace, generation, updated_at) VALUES ($1, 1, now())
ON CONFLICT (namespace) DO UPDATE SET generation = n.generation + 1, updated_at = now()
RETURNING generation, ` + `(extract(epoch FROM now()) * 1000)::bigint`,
	generation: `SELECT generation FROM %[2]s WHERE namespace = $1`,
	known:      `SELECT EXISTS (SELECT 1 FROM %[2]s WHERE namespace = $1)`,
	get:        `SELECT ` + catalogColumnsPG + ` FROM %[1]s WHERE namespace = $1 AND name = $2`,
	list:       `SELECT ` + catalogColumnsPG + ` FROM %[1]s WHERE namespace = $1 ORDER BY name`,
	// $1 namespace, $2 name, $3 spec, $4 tz, $5 prev spec, $6 prev tz,
	// $7 effective ms, $8 handler, $9 args, $10 misfire, $11 overlap,
	// $12 deadline ms, $13 catch-up, $14 attempts, $15 at most ms, $16 at
	// least ms, $17 version, $18 now ms, $19 keep-alive.
	put: `INSERT INTO %[1]s AS c (namespace, name, spec, tz, prev_spec, prev_tz, effective_at, resumed_at, handler, args, enabled,
	misfire, overlap, starting_deadline_ms, catch_up_max, max_attempts, lock_at_most_for_ms, lock_at_least_for_ms, version, created_at, updated_at, keep_alive)
VALUES ($1, $2, $3, $4, $5, $6, (timestamptz 'epoch' + $7 * interval '1 millisecond'), timestamptz 'epoch', $8, $9::json, true,
	$10, $11, $12, $13, $14, $15, $16, $17, (timestamptz 'epoch' + $18 * interval '1 millisecond'), (timestamptz 'epoch' + $18 * interval '1 millisecond'), $19)
ON CONFLICT (namespace, name) DO UPDATE SET spec = $3, tz = $4, prev_spec = $5, prev_tz = $6,
	effective_at = excluded.effective_at, handler = $8, args = $9::json, misfire = $10, overlap = $11,
	starting_deadline_ms = $12, catch_up_max = $13, max_attempts = $14, lock_at_most_for_ms = $15, lock_at_least_for_ms = $16,
	version = $17, updated_at = excluded.updated_at, keep_alive = $19 -- enabled stays: a paused schedule stays paused`,
	// $1 namespace, $2 name, $3 enabled, $4 version, $5 now ms. A resume
	// starts from now: no tick of the paused time runs (a pending edit
	// still takes effect at its instant).
	setEnabled: `UPDATE %[1]s SET enabled = $3, version = $4, updated_at = (timestamptz 'epoch' + $5 * interval '1 millisecond'),
	resumed_at = CASE WHEN $3 AND NOT enabled THEN (timestamptz 'epoch' + $5 * interval '1 millisecond') ELSE resumed_at END
WHERE namespace = $1 AND name = $2`,
	delete: `DELETE FROM %[1]s WHERE namespace = $1 AND name = $2`,
	// $1 namespace, $2 liveness ms.
	replicas: `SELECT node, handlers FROM %[3]s WHERE namespace = $1 AND seen_at > now() - $2 * interval '1 millisecond' ORDER BY node`,
	heartbeat: `INSERT INTO %[3]s (namespace, node, handlers, seen_at) VALUES ($1, $2, $3, now())
ON CONFLICT (namespace, node) DO UPDATE SET handlers = $3, seen_at = now()`,
	leave: `DELETE FROM %[3]s WHERE namespace = $1 AND node = $2`,
	check: `SELECT args::text, version FROM %[1]s
WHERE namespace = $1 AND name = $2 AND enabled
  AND (timestamptz 'epoch' + $3 * interval '1 millisecond') >= resumed_at -- no tick of a paused time
  AND CASE WHEN $6::boolean -- a run now: the latest request, not one a later RunNow superseded
      THEN run_now_at = (timestamptz 'epoch' + $3 * interval '1 millisecond')
      WHEN (timestamptz 'epoch' + $3 * interval '1 millisecond') < effective_at
      THEN prev_spec = $4 AND prev_tz = $5 ELSE spec = $4 AND tz = $5 END`,
	runNow: `UPDATE %[1]s SET run_now_at = timestamptz 'epoch' + $3 * interval '1 millisecond', run_now_taken = false
WHERE namespace = $1 AND name = $2 AND enabled`,
	take: `UPDATE %[1]s SET run_now_taken = true
WHERE namespace = $1 AND name = $2 AND enabled AND NOT run_now_taken
  AND run_now_at = timestamptz 'epoch' + $3 * interval '1 millisecond'
  AND run_now_at >= resumed_at -- a pause after the request cancelled it
RETURNING args::text, version`,
}

var catalogSQLite = catalogSQL{
	migrations: []migrate.Migration{
		{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	namespace            TEXT    NOT NULL,
	name                 TEXT    NOT NULL,
	spec                 TEXT    NOT NULL,
	tz                   TEXT    NOT NULL,
	prev_spec            TEXT,
	prev_tz              TEXT,
	effective_ms         INTEGER NOT NULL,
	resumed_ms           INTEGER NOT NULL,
	handler              TEXT    NOT NULL,
	args                 TEXT    NOT NULL,
	enabled              INTEGER NOT NULL,
	misfire              TEXT    NOT NULL,
	overlap              TEXT    NOT NULL,
	starting_deadline_ms INTEGER NOT NULL,
	catch_up_max         INTEGER NOT NULL,
	max_attempts         INTEGER NOT NULL,
	lock_at_most_for_ms  INTEGER NOT NULL,
	lock_at_least_for_ms INTEGER NOT NULL,
	version              INTEGER NOT NULL,
	created_ms           INTEGER NOT NULL,
	updated_ms           INTEGER NOT NULL,
	PRIMARY KEY (namespace, name)
) WITHOUT ROWID`},
		{Version: 2, SQL: `CREATE TABLE IF NOT EXISTS %[2]s (
	namespace  TEXT    PRIMARY KEY,
	generation INTEGER NOT NULL,
	updated_ms INTEGER NOT NULL
) WITHOUT ROWID`},
		{Version: 3, SQL: `CREATE TABLE IF NOT EXISTS %[3]s (
	namespace TEXT    NOT NULL,
	node      TEXT    NOT NULL,
	handlers  TEXT    NOT NULL,
	seen_ms   INTEGER NOT NULL,
	PRIMARY KEY (namespace, node)
) WITHOUT ROWID`},
		{Version: 4, SQL: `ALTER TABLE %[1]s ADD COLUMN keep_alive INTEGER NOT NULL DEFAULT 1`},
		{Version: 5, SQL: `ALTER TABLE %[1]s ADD COLUMN run_now_ms INTEGER`},
		{Version: 6, SQL: `ALTER TABLE %[1]s ADD COLUMN run_now_taken INTEGER NOT NULL DEFAULT 0`},
	},
	bump: `INSERT INTO %[2]s AS n (namespace, generation, updated_ms) VALUES ($1, 1, ` + sqliteNow + `)
ON CONFLICT (namespace) DO UPDATE SET generation = n.generation + 1, updated_ms = ` + sqliteNow + `
RETURNING generation, ` + sqliteNow,
	generation: `SELECT generation FROM %[2]s WHERE namespace = $1`,
	known:      `SELECT EXISTS (SELECT 1 FROM %[2]s WHERE namespace = $1)`,
	get:        `SELECT ` + catalogColumnsSQLite + ` FROM %[1]s WHERE namespace = $1 AND name = $2`,
	list:       `SELECT ` + catalogColumnsSQLite + ` FROM %[1]s WHERE namespace = $1 ORDER BY name`,
	put: `INSERT INTO %[1]s (namespace, name, spec, tz, prev_spec, prev_tz, effective_ms, resumed_ms, handler, args, enabled,
	misfire, overlap, starting_deadline_ms, catch_up_max, max_attempts, lock_at_most_for_ms, lock_at_least_for_ms, version, created_ms, updated_ms, keep_alive)
VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $9, 1, $10, $11, $12, $13, $14, $15, $16, $17, $18, $18, $19)
ON CONFLICT (namespace, name) DO UPDATE SET spec = $3, tz = $4, prev_spec = $5, prev_tz = $6,
	effective_ms = $7, handler = $8, args = $9, misfire = $10, overlap = $11,
	starting_deadline_ms = $12, catch_up_max = $13, max_attempts = $14, lock_at_most_for_ms = $15, lock_at_least_for_ms = $16,
	version = $17, updated_ms = $18, keep_alive = $19`,
	setEnabled: `UPDATE %[1]s SET enabled = $3, version = $4, updated_ms = $5,
	resumed_ms = CASE WHEN $3 AND NOT enabled THEN $5 ELSE resumed_ms END
WHERE namespace = $1 AND name = $2`,
	delete:   `DELETE FROM %[1]s WHERE namespace = $1 AND name = $2`,
	replicas: `SELECT node, handlers FROM %[3]s WHERE namespace = $1 AND seen_ms > ` + sqliteNow + ` - $2 ORDER BY node`,
	heartbeat: `INSERT INTO %[3]s (namespace, node, handlers, seen_ms) VALUES ($1, $2, $3, ` + sqliteNow + `)
ON CONFLICT (namespace, node) DO UPDATE SET handlers = $3, seen_ms = ` + sqliteNow,
	leave: `DELETE FROM %[3]s WHERE namespace = $1 AND node = $2`,
	check: `SELECT args, version FROM %[1]s
WHERE namespace = $1 AND name = $2 AND enabled AND $3 >= resumed_ms
  AND CASE WHEN $6 THEN run_now_ms = $3
      WHEN $3 < effective_ms THEN prev_spec = $4 AND prev_tz = $5 ELSE spec = $4 AND tz = $5 END`,
	runNow: `UPDATE %[1]s SET run_now_ms = $3, run_now_taken = 0 WHERE namespace = $1 AND name = $2 AND enabled`,
	take: `UPDATE %[1]s SET run_now_taken = 1
WHERE namespace = $1 AND name = $2 AND enabled AND NOT run_now_taken AND run_now_ms = $3 AND run_now_ms >= resumed_ms
RETURNING args, version`,
}

const catalogColumnsSQLite = `name, spec, tz, prev_spec, prev_tz, effective_ms, resumed_ms, handler, args, enabled,
	misfire, overlap, starting_deadline_ms, catch_up_max, max_attempts, lock_at_most_for_ms, lock_at_least_for_ms, version,
	created_ms, updated_ms, keep_alive, run_now_ms, ` + sqliteNow

// claimCatalogPG is run-key mode's claim of a catalog schedule's tick, in
// one round trip: the row is checked (and share-locked until the insert
// commits, so a pause or delete that returned has been seen by every
// later claim, and one that did not waits for the claims in flight), then
// the run row is inserted on the run key. It returns the args and version
// (NULL when the catalog refused the tick) and the token and state (NULL
// when another node has the tick). %[1]s is the run table; the check's
// $1..$6 are namespace, name, fire ms, spec, tz, run now; $7 token, $8
// node, $9 ttl ms, $10 forbid overlap, $11 owner.
const claimCatalogPG = `WITH c AS (
	%[2]s
	FOR SHARE
), ins AS (
	INSERT INTO %[1]s (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at, owner)
	SELECT $1, $2, timestamptz 'epoch' + $3 * interval '1 millisecond', $7, $8, 1,
	       CASE WHEN $10::boolean AND EXISTS (
	           SELECT 1 FROM %[1]s WHERE namespace = $1 AND job = $2 AND state = 'running' AND expires_at > now())
	       THEN 'skipped' ELSE 'running' END,
	       now(), now() + $9 * interval '1 millisecond', $11
	FROM c
	ON CONFLICT (namespace, job, fire_at) DO NOTHING
	RETURNING token, state
)
SELECT (SELECT args FROM c), (SELECT version FROM c), (SELECT token FROM ins), (SELECT state FROM ins)`
