package pglease

import "github.com/aegislab/aegis/internal/migrate"

// Every statement below is one round trip, resolved by the primary key, and
// reads the time from the database (now()), never from the client. %[1]s is
// the quoted table name.

// migrations create the lease table. A key's row is never deleted: its
// token must survive every release and expiry.
var migrations = []migrate.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	key        text        PRIMARY KEY,
	owner      text        NOT NULL,
	token      bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	granted_at timestamptz NOT NULL
)`},
}

// acquireSQL grants a free or expired key, bumping its token in the same
// statement. When the key is live it updates nothing and returns no row.
// Concurrent grants of one key serialize on the row lock; the loser's WHERE
// is re-evaluated against the winner's row and fails.
const acquireSQL = `INSERT INTO %[1]s AS l (key, owner, token, expires_at, granted_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 microsecond', now())
ON CONFLICT (key) DO UPDATE
SET owner = excluded.owner,
    token = l.token + 1,
    expires_at = excluded.expires_at,
    granted_at = excluded.granted_at
WHERE l.expires_at <= now() -- free (released) or expired
RETURNING token`

// renewSQL extends a lease that this grant still holds.
const renewSQL = `UPDATE %[1]s
SET expires_at = now() + $4 * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_at > now()                     -- an expired lease cannot be revived`

// releaseSQL frees a key that this grant still holds. The row stays, with
// its token; expires_at = -infinity marks it free.
const releaseSQL = `UPDATE %[1]s
SET expires_at = '-infinity'
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_at > now()`
