package sqlitelease

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/rowlease"
)

// The operator's reads (Inspector). %[1]s is the quoted lease table, %[2]s
// the quoted grant history; in keysSQL and keySQL, %%[1]s becomes the
// holder column. Times are the stored milliseconds; a released key's
// expires_ms is 0.
const (
	tablesSQL = `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1),
	EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?2),
	EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = 'holder')`
	keysSQL   = `SELECT key, %%[1]s, token, granted_ms, expires_ms FROM %[1]s ORDER BY key LIMIT $1`
	keySQL    = `SELECT key, %%[1]s, token, granted_ms, expires_ms FROM %[1]s WHERE key = $1`
	grantsSQL = `SELECT token, holder, granted_ms FROM %[2]s WHERE key = $1 ORDER BY token DESC LIMIT $2`
)

// Key is a key's row of the lease table as an operator reads it: key,
// holder name (Config.Holder; empty for a grant made before holder names),
// token, the grant's and the expiry's time (the host's clock, to the
// millisecond), and whether it was released (its Expires is then the Unix
// epoch). The owner id is never read.
type Key = rowlease.Key

// Grant is a grant recorded in the grant history (Config.History): token,
// holder name and time.
type Grant = rowlease.Grant

// Inspector reads a lease table and its grant history for an operator
// (aegis console). Unlike New it creates and migrates nothing: Tables
// tells what is there. It is safe for concurrent use.
type Inspector struct {
	r rowlease.Reader
}

// NewInspector returns an Inspector of the tables of cfg (Table, and the
// grant history named after it; the other fields are checked as New checks
// them, and not used) on db. A nil cfg means defaults. It does no I/O; bad config is an error wrapping
// aegis.ErrInvalid.
func NewInspector(db *sql.DB, cfg *Config) (*Inspector, error) {
	if db == nil {
		return nil, fmt.Errorf("sqlitelease: %w: db is nil", aegis.ErrInvalid)
	}
	c, t, err := config(cfg)
	if err != nil {
		return nil, err
	}
	base := c.Table[strings.LastIndexByte(c.Table, '.')+1:]
	f := func(s string) string { return fmt.Sprintf(s, t.lease, t.grant) }
	return &Inspector{r: rowlease.Reader{DB: db, Args: []any{base, base + grantSuffix}, ReadStatements: rowlease.ReadStatements{
		Tables: tablesSQL, Keys: f(keysSQL), Key: f(keySQL), Grants: f(grantsSQL), Millis: true,
	}}}, nil
}

// Tables tells whether the lease table and the grant history are there.
func (i *Inspector) Tables(ctx context.Context) (lease, history bool, err error) {
	lease, history, err = i.r.Tables(ctx)
	if err != nil {
		return false, false, fmt.Errorf("sqlitelease: %w", err)
	}
	return lease, history, nil
}

// Keys reads every key of the lease table, ordered by key, at most limit
// (at least 1). A table created before holder names reads as keys without
// holders.
func (i *Inspector) Keys(ctx context.Context, limit int) ([]Key, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitelease: %w: keys: limit %d is not positive", aegis.ErrInvalid, limit)
	}
	ks, err := i.r.Keys(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitelease: %w", err)
	}
	return ks, nil
}

// Key reads key's row; ok is false when the table has none (no grant of
// key was ever made).
func (i *Inspector) Key(ctx context.Context, key string) (k Key, ok bool, err error) {
	k, ok, err = i.r.Key(ctx, key)
	if err != nil {
		return Key{}, false, fmt.Errorf("sqlitelease: %w", err)
	}
	return k, ok, nil
}

// Grants reads key's recorded grants, the newest (greatest token) first,
// at most limit (at least 1). A missing history is an error: Tables tells
// first whether it is there.
func (i *Inspector) Grants(ctx context.Context, key string, limit int) ([]Grant, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitelease: %w: grants: limit %d is not positive", aegis.ErrInvalid, limit)
	}
	gs, err := i.r.Grants(ctx, key, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitelease: %w", err)
	}
	return gs, nil
}
