package pglease

import "github.com/aegislab/aegis/internal/migrate"

// Every statement below reads the time from the database (now()), never
// from the client. The lease statements are one round trip each, resolved
// by the primary key. %[1]s is the quoted lease table, %[2]s the quoted
// waiter table; in the release statements %[3]s is the notification channel
// as a string literal, in the grant statements the quoted grant history
// table, and %[4]d the history's length. A grant's $4 is its holder name.

// migrations create the lease table and the waiter queue. A key's row is
// never deleted: its token must survive every release and expiry. Version 2
// and 3 add fair waiting (see package rowlease) to tables created before;
// version 4 the holder name (empty on the rows of grants made before it,
// which the console shows as unknown).
var migrations = []migrate.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	key        text        PRIMARY KEY,
	owner      text        NOT NULL,
	token      bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	granted_at timestamptz NOT NULL
)`},
	// queue_until is the latest expiry of a waiter of the key: once it has
	// passed, nobody waits and a grant need not read the queue.
	{Version: 2, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS queue_until timestamptz NOT NULL DEFAULT '-infinity'`},
	{Version: 3, SQL: `CREATE TABLE IF NOT EXISTS %[2]s (
	key        text        NOT NULL,
	waiter     text        NOT NULL, -- the owner id the waiter will be granted under
	since      timestamptz NOT NULL, -- its place in the queue
	expires_at timestamptz NOT NULL, -- refreshed while it waits
	PRIMARY KEY (key, waiter)
)`},
	{Version: 4, SQL: `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT ''`},
}

// historyMigrations create the grant history (Config.History), a component
// of its own: a database whose Lockers never turn the history on has no such
// table, which tells the console that it is off. %[1]s is the quoted table.
var historyMigrations = []migrate.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	key        text        NOT NULL,
	token      bigint      NOT NULL,
	holder     text        NOT NULL,
	granted_at timestamptz NOT NULL,
	PRIMARY KEY (key, token)
)`},
}

// grantSQL grants a free or expired key, bumping its token in the same
// statement, unless waiters are queued for it (queue_until is the latest
// expiry of their entries). When the key is live or queued for it updates
// nothing and returns no row. Concurrent grants of one key serialize on the
// row lock; the loser's WHERE is re-evaluated against the winner's row and
// fails. The hot path: it reads nothing but its own row.
const grantSQL = grantInsert + `
RETURNING token`

const grantInsert = `INSERT INTO %[1]s AS l (key, owner, holder, token, expires_at, granted_at)
VALUES ($1, $2, $4, 1, now() + $3 * interval '1 microsecond', now())
ON CONFLICT (key) DO UPDATE
SET owner = excluded.owner,
    holder = excluded.holder,
    token = l.token + 1,
    expires_at = excluded.expires_at,
    granted_at = excluded.granted_at
WHERE l.expires_at <= now()  -- free (released) or expired
  AND l.queue_until <= now() -- nobody waits`

// grantHistorySQL is grantSQL that also records the grant in the history
// (recordSQL), in the same statement.
const grantHistorySQL = `WITH g AS (
` + grantInsert + `
RETURNING token, granted_at
)` + recordSQL + `
SELECT token FROM g`

// recordSQL inserts the grant that g returned into the history and deletes
// the key's grants beyond the last %[4]d. A key's token goes up by exactly
// one per grant (only the grant statements change it, and the row is never
// deleted), so the grant that falls off is the one of token-N: trimmed
// deletes that one row by its primary key. A range (token <= token-N)
// would also catch the grants that an equality misses (a Locker with a
// smaller History, or without one, granted in between), but a range scan
// walks from the key's first index entry, over every row deleted since the
// last vacuum: under a steady stream of grants to one key its cost grew
// until autovacuum came by (acquire+release 1.35× to 11× the cost without
// history, against 1.22× for the equality; docs/decisions.md). So the range
// runs only on every 64th token (swept): what the equality missed stays
// until then, at most the grants since the last sweep. Neither DELETE sees
// the row this statement inserts (one snapshot), and neither needs to: the
// new token is never below the bound. A key whose lease row was deleted by
// hand starts again at token 1; ON CONFLICT overwrites the old grant of that
// token instead of failing the grant.
const recordSQL = `, recorded AS (
	INSERT INTO %[3]s (key, token, holder, granted_at)
	SELECT $1, token, $4, granted_at FROM g
	ON CONFLICT (key, token) DO UPDATE SET holder = excluded.holder, granted_at = excluded.granted_at
), trimmed AS (
	DELETE FROM %[3]s WHERE key = $1 AND token = (SELECT token FROM g) - %[4]d
), swept AS (
	DELETE FROM %[3]s WHERE key = $1 AND token < (SELECT token FROM g) - %[4]d
	  AND (SELECT token FROM g) %% 64 = 0 -- a one-time filter: no scan on other tokens
)`

// grantQueuedSQL is the grant of waiter $2: it takes the key unless a live
// waiter that queued before it is still there, removes its entry, and
// lowers queue_until to the latest expiry of the others (-infinity when
// none is left, so TryAcquire is not refused for a queue that is gone). The
// lease row is locked first (the EXISTS over g runs before the DELETE
// reads), the order every statement here takes, so two of them cannot
// deadlock. An entry that commits while this runs is not seen by the new
// queue_until; its waiter's next refresh (every 250ms) raises it again.
//
// A release wakes every waiter of the key at once, and all but the first
// in the queue must fail. The SELECT's WHERE lets them fail on a plain
// read, before ON CONFLICT locks the lease row (it locks it even when its
// WHERE then fails): otherwise the first waiter queued behind the others
// on that lock, one statement each. It reads
// the statement's snapshot, as the ON CONFLICT's subqueries do, so it
// refuses no grant that they would accept (but for a lease row that the
// snapshot shows held and the row lock would show released: that waiter
// is woken by the release's NOTIFY, or polls); the check under the lock
// stays the one that decides.
const grantQueuedSQL = `WITH g AS (
INSERT INTO %[1]s AS l (key, owner, holder, token, expires_at, granted_at)
SELECT $1, $2, $4, 1, now() + $3 * interval '1 microsecond', now()
WHERE NOT EXISTS (SELECT 1 FROM %[1]s h -- held: no lock taken
                  WHERE h.key = $1 AND h.expires_at > now())
  AND NOT EXISTS (SELECT 1 FROM %[2]s w -- an earlier live waiter: no lock taken
                  WHERE w.key = $1 AND w.waiter <> $2 AND w.expires_at > now()
                    AND w.since < coalesce((SELECT m.since FROM %[2]s m WHERE m.key = $1 AND m.waiter = $2), 'infinity'))
ON CONFLICT (key) DO UPDATE
SET owner = excluded.owner,
    holder = excluded.holder,
    token = l.token + 1,
    expires_at = excluded.expires_at,
    granted_at = excluded.granted_at,
    queue_until = coalesce((SELECT max(o.expires_at) FROM %[2]s o
                            WHERE o.key = $1 AND o.waiter <> $2 AND o.expires_at > now()), '-infinity')
WHERE l.expires_at <= now() -- free (released) or expired
  AND NOT EXISTS (SELECT 1 FROM %[2]s w -- no earlier live waiter
                  WHERE w.key = $1 AND w.waiter <> $2 AND w.expires_at > now()
                    AND w.since < coalesce((SELECT m.since FROM %[2]s m WHERE m.key = $1 AND m.waiter = $2), 'infinity'))
RETURNING token, granted_at
), dequeued AS (
	DELETE FROM %[2]s WHERE key = $1 AND waiter = $2 AND EXISTS (SELECT 1 FROM g)
)`

// grantQueuedEnd ends grantQueuedSQL, after recordSQL when the history is
// on.
const grantQueuedEnd = `
SELECT token FROM g`

// renewSQL extends a lease that this grant still holds.
const renewSQL = `UPDATE %[1]s
SET expires_at = now() + $4 * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_at > now()                     -- an expired lease cannot be revived`

// releaseSQL frees a key that this grant still holds. The row stays, with
// its token; expires_at = -infinity marks it free. It keeps the holder: the
// row then says who had the key last, which is what an operator looking at
// a free key asks, and the next grant overwrites it anyway. Waiters are notified only
// when the key has some (queue_until), so a release nobody waits for costs
// no NOTIFY, whose commit serializes on a cluster-wide lock.
const releaseSQL = `UPDATE %[1]s
SET expires_at = '-infinity'
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_at > now()
RETURNING CASE WHEN queue_until > now() THEN pg_notify(%[3]s, key) END`

// enqueueSQL enters or refreshes waiter $2 in key $1's queue until now+$3µs,
// keeping its place (since), drops the entries of waiters that expired (they
// crashed or gave up without a word), and raises the key's queue_until hint.
// The lease row is updated first (the queue statements read its result), the
// lock order of grantQueuedSQL. A key without a row is not held: nothing is
// queued, and the waiter's next grant takes it.
const enqueueSQL = `WITH hint AS (
	UPDATE %[1]s SET queue_until = greatest(queue_until, now() + $3 * interval '1 microsecond')
	WHERE key = $1 RETURNING key
), gone AS (
	DELETE FROM %[2]s WHERE key IN (SELECT key FROM hint) AND waiter <> $2 AND expires_at <= now()
)
INSERT INTO %[2]s AS w (key, waiter, since, expires_at)
SELECT key, $2, now(), now() + $3 * interval '1 microsecond' FROM hint
ON CONFLICT (key, waiter) DO UPDATE SET expires_at = excluded.expires_at`

// dequeueSQL removes a waiter that gave up, lowers queue_until as
// grantQueuedSQL does, and wakes the key's other waiters: the one behind it
// may now be first. The lease row is locked first.
const dequeueSQL = `WITH hint AS (
	UPDATE %[1]s SET queue_until = coalesce((SELECT max(o.expires_at) FROM %[2]s o
	                                         WHERE o.key = $1 AND o.waiter <> $2 AND o.expires_at > now()), '-infinity')
	WHERE key = $1 RETURNING key
), gone AS (
	DELETE FROM %[2]s WHERE key IN (SELECT key FROM hint) AND waiter = $2 RETURNING key
)
SELECT pg_notify(%[3]s, key) FROM gone`
