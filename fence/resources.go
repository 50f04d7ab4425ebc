package fence

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// The operator's reads of the fence (aegis console's Fence page), beside
// Refusals. resourcesSQL works on PostgreSQL and SQLite.
const resourcesSQL = `SELECT resource, token FROM aegis_fence ORDER BY resource LIMIT $1`

// Resource is a resource's row of the fence table: the greatest token the
// fence accepted for it. The owner's hash is never read.
type Resource struct {
	Resource string
	Token    aegis.Token
}

// Resources reads the fence table, by resource name, at most limit rows
// (limit ≤ 0 means 100), through database/sql (PostgreSQL or SQLite). A
// missing table is an error: Tables tells first whether it is there.
func Resources(ctx context.Context, db *sql.DB, limit int) ([]Resource, error) {
	return std.Resources(ctx, db, limit)
}

// Resources is the package function Resources on f's tables.
func (f *Fence) Resources(ctx context.Context, db *sql.DB, limit int) ([]Resource, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: fence: resources: db is nil", aegis.ErrInvalid)
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.QueryContext(ctx, f.t.sql(resourcesSQL), limit)
	if err != nil {
		return nil, fmt.Errorf("fence: read the fence table: %w", err)
	}
	defer rows.Close()
	var out []Resource
	for rows.Next() {
		var r Resource
		var token int64
		if err := rows.Scan(&r.Resource, &token); err != nil {
			return nil, fmt.Errorf("fence: read the fence table: %w", err)
		}
		r.Token = aegis.Token(token)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fence: read the fence table: %w", err)
	}
	return out, nil
}

// Tables tells which of the fence's tables db has (PostgreSQL, in the
// connection's search_path, or SQLite): the fence table, which Migrate
// creates for Check and CheckLease, and the refusal table, where the fence
// counts its refusals (Migrate's version 3; LogTable tells of the refusal
// log, version 4). It creates nothing.
func Tables(ctx context.Context, db *sql.DB) (fence, refusals bool, err error) {
	return std.Tables(ctx, db)
}

// Tables is the package function Tables on f's tables.
func (f *Fence) Tables(ctx context.Context, db *sql.DB) (fence, refusals bool, err error) {
	if db == nil {
		return false, false, fmt.Errorf("%w: fence: tables: db is nil", aegis.ErrInvalid)
	}
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return false, false, fmt.Errorf("fence: tables: %w", err)
	}
	if fence, err = migrate.Exists(ctx, db, d, f.t.table("aegis_fence")); err != nil {
		return false, false, fmt.Errorf("fence: %w", err)
	}
	if refusals, err = migrate.Exists(ctx, db, d, f.t.table("aegis_fence_refusal")); err != nil {
		return false, false, fmt.Errorf("fence: %w", err)
	}
	return fence, refusals, nil
}
