package sqlitelease

import "github.com/aegislab/aegis/internal/migrate"

// The statements mirror pglease's. SQLite has no server, so "store time" is
// the host's clock read by SQLite itself (nowMS), shared by every process on
// the host. Each operation runs inside BEGIN IMMEDIATE, so the statements of
// one operation see and change the tables alone. %[1]s is the quoted lease
// table, %[2]s the quoted waiter table; in the grants, %[3]s is the holder
// name as a string literal. It is not a parameter: a statement is prepared
// and bound inside the write lock, and a fourth parameter made locktest's
// ConcurrentCounter take 1.3x to 2.5x as long (under -race, measured against
// the literal in the same run). A holder has no control character and its
// quotes are doubled (holderLiteral), which is all an SQLite string needs.
// %[4]s is ", granted_ms" when the grant is recorded in the history (the
// time it records), else nothing.

// nowMS is SQLite's current time in milliseconds since the Unix epoch; it is
// constant within one statement.
const nowMS = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// migrations create the lease table and the waiter queue. Versions 2 and 3
// add fair waiting (see package rowlease) to tables created before, version
// 4 the holder name (empty on the rows of grants made before it, which the
// console shows as unknown).
var migrations = []migrate.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	key        TEXT    PRIMARY KEY,
	owner      TEXT    NOT NULL,
	token      INTEGER NOT NULL,
	expires_ms INTEGER NOT NULL,
	granted_ms INTEGER NOT NULL
) WITHOUT ROWID`},
	// queue_ms is the latest expiry of a waiter of the key: once it has
	// passed, nobody waits and a grant need not read the queue.
	{Version: 2, SQL: `ALTER TABLE %[1]s ADD COLUMN queue_ms INTEGER NOT NULL DEFAULT 0`},
	{Version: 3, SQL: `CREATE TABLE IF NOT EXISTS %[2]s (
	key        TEXT    NOT NULL,
	waiter     TEXT    NOT NULL, -- the owner id the waiter will be granted under
	since_ms   INTEGER NOT NULL, -- its place in the queue
	expires_ms INTEGER NOT NULL, -- refreshed while it waits
	PRIMARY KEY (key, waiter)
) WITHOUT ROWID`},
	{Version: 4, SQL: `ALTER TABLE %[1]s ADD COLUMN holder TEXT NOT NULL DEFAULT ''`},
}

// historyMigrations create the grant history (Config.History), a component
// of its own: a database whose Lockers never turn the history on has no such
// table, which tells the console that it is off. %[1]s is the quoted table.
var historyMigrations = []migrate.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	key        TEXT    NOT NULL,
	token      INTEGER NOT NULL,
	holder     TEXT    NOT NULL,
	granted_ms INTEGER NOT NULL,
	PRIMARY KEY (key, token)
) WITHOUT ROWID`},
}

// recordSQL inserts a grant into the history (%[1]s), in the grant's
// transaction. A key whose lease row was deleted by hand starts again at
// token 1: the old grant of that token is overwritten, the grant does not
// fail.
const recordSQL = `INSERT INTO %[1]s (key, token, holder, granted_ms) VALUES ($1, $2, $3, $4)
ON CONFLICT (key, token) DO UPDATE SET holder = excluded.holder, granted_ms = excluded.granted_ms`

// trimSQL deletes the key's grants beyond the last N: $2 is the new token
// minus N. A key's token goes up by exactly one per grant (only the grant
// statements change it, and the row is never deleted), so the last N grants
// are the tokens above it: one range of the primary key.
const trimSQL = `DELETE FROM %[1]s WHERE key = $1 AND token <= $2`

// grantSQL grants a free or expired key and increments its token, unless
// waiters are queued for it (queue_ms is the latest expiry of their
// entries). The hot path: it reads nothing but its own row.
const grantSQL = `INSERT INTO %[1]s AS l (key, owner, holder, token, expires_ms, granted_ms)
VALUES ($1, $2, %[3]s, 1, ` + nowMS + ` + $3, ` + nowMS + `)
ON CONFLICT (key) DO UPDATE
SET owner = excluded.owner,
    holder = excluded.holder,
    token = l.token + 1,
    expires_ms = excluded.expires_ms,
    granted_ms = excluded.granted_ms
WHERE l.expires_ms <= ` + nowMS + ` -- free (released) or expired
  AND l.queue_ms <= ` + nowMS + `   -- nobody waits
RETURNING token%[4]s`

// grantQueuedSQL is the grant of waiter $2: it takes the key unless a live
// waiter that queued before it is still there. Its transaction then removes
// the entry (dequeueSQL) and lowers the hint (unhintSQL).
const grantQueuedSQL = `INSERT INTO %[1]s AS l (key, owner, holder, token, expires_ms, granted_ms)
VALUES ($1, $2, %[3]s, 1, ` + nowMS + ` + $3, ` + nowMS + `)
ON CONFLICT (key) DO UPDATE
SET owner = excluded.owner,
    holder = excluded.holder,
    token = l.token + 1,
    expires_ms = excluded.expires_ms,
    granted_ms = excluded.granted_ms
WHERE l.expires_ms <= ` + nowMS + ` -- free (released) or expired
  AND NOT EXISTS (SELECT 1 FROM %[2]s w -- no earlier live waiter
                  WHERE w.key = $1 AND w.waiter <> $2 AND w.expires_ms > ` + nowMS + `
                    AND w.since_ms < coalesce((SELECT m.since_ms FROM %[2]s m WHERE m.key = $1 AND m.waiter = $2), 9223372036854775807))
RETURNING token%[4]s`

// unhintSQL lowers the key's queue_ms to the latest expiry of the entries
// left (0 when none is), after a waiter left the queue, so TryAcquire is not
// refused for a queue that is gone.
const unhintSQL = `UPDATE %[1]s
SET queue_ms = coalesce((SELECT max(w.expires_ms) FROM %[2]s w WHERE w.key = $1 AND w.expires_ms > ` + nowMS + `), 0)
WHERE key = $1`

// dequeueSQL removes a waiter's entry: after its grant, in the same
// transaction, or when it gives up.
const dequeueSQL = `DELETE FROM %[2]s WHERE key = $1 AND waiter = $2`

// hintSQL raises the key's queue_ms hint to the new entry's expiry. A key
// without a row is not held: nothing is queued, and the waiter's next grant
// takes it.
const hintSQL = `UPDATE %[1]s SET queue_ms = max(queue_ms, ` + nowMS + ` + $2) WHERE key = $1`

// pruneSQL drops the entries of waiters that expired (they crashed or gave
// up without a word).
const pruneSQL = `DELETE FROM %[2]s WHERE key = $1 AND waiter <> $2 AND expires_ms <= ` + nowMS

// enqueueSQL enters or refreshes waiter $2 in key $1's queue until now+$3ms,
// keeping its place (since_ms).
const enqueueSQL = `INSERT INTO %[2]s AS w (key, waiter, since_ms, expires_ms)
VALUES ($1, $2, ` + nowMS + `, ` + nowMS + ` + $3)
ON CONFLICT (key, waiter) DO UPDATE SET expires_ms = excluded.expires_ms`

// renewSQL extends a lease that this grant still holds.
const renewSQL = `UPDATE %[1]s
SET expires_ms = ` + nowMS + ` + $4
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_ms > ` + nowMS

// releaseSQL frees a key that this grant still holds; the row and its token
// stay. expires_ms = 0 marks it free. It keeps the holder: the row then says
// who had the key last, which is what an operator looking at a free key
// asks, and the next grant overwrites it anyway.
const releaseSQL = `UPDATE %[1]s
SET expires_ms = 0
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_ms > ` + nowMS
