package sqlitelease

import "github.com/aegislab/aegis/internal/migrate"

// The statements mirror pglease's. SQLite has no server, so "store time" is
// the host's clock read by SQLite itself (nowMS), shared by every process on
// the host. Each statement runs inside BEGIN IMMEDIATE. %[1]s is the quoted
// table name.

// nowMS is SQLite's current time in milliseconds since the Unix epoch; it is
// constant within one statement.
const nowMS = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

var migrations = []migrate.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS %[1]s (
	key        TEXT    PRIMARY KEY,
	owner      TEXT    NOT NULL,
	token      INTEGER NOT NULL,
	expires_ms INTEGER NOT NULL,
	granted_ms INTEGER NOT NULL
) WITHOUT ROWID`},
}

// acquireSQL grants a free or expired key and increments its token.
const acquireSQL = `INSERT INTO %[1]s AS l (key, owner, token, expires_ms, granted_ms)
VALUES ($1, $2, 1, ` + nowMS + ` + $3, ` + nowMS + `)
ON CONFLICT (key) DO UPDATE
SET owner = excluded.owner,
    token = l.token + 1,
    expires_ms = excluded.expires_ms,
    granted_ms = excluded.granted_ms
WHERE l.expires_ms <= ` + nowMS + ` -- free (released) or expired
RETURNING token`

// renewSQL extends a lease that this grant still holds.
const renewSQL = `UPDATE %[1]s
SET expires_ms = ` + nowMS + ` + $4
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_ms > ` + nowMS

// releaseSQL frees a key that this grant still holds; the row and its token
// stay. expires_ms = 0 marks it free.
const releaseSQL = `UPDATE %[1]s
SET expires_ms = 0
WHERE key = $1 AND owner = $2 AND token = $3 -- compare owner and token
  AND expires_ms > ` + nowMS
