package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis"
)

// Querier is what Landed needs: a pgx pool or connection.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Landed reports whether a transaction that checked lease.Token for
// resource committed: the fence table records that token for resource,
// from lease.Owner (for a lease checked by CheckLease), or bare (an empty
// Owner: a token checked by Check).
//
// Call it when a commit's reply was lost (the connection broke during
// COMMIT: the error is no answer of the server's) before writing again:
// the fence does not tell a retry from a second write of the same holder,
// which it lets land (a holder may write several times with one token), so
// a business write retried after a commit that did land is applied twice.
// True: the transaction committed, its business write with it; do not
// write again. False: it did not commit, or a later token has replaced
// the record since (a retry is then refused with aegis.ErrStale anyway):
// write again.
//
// A resource Check would refuse, or a token that is not positive, is an
// error wrapping aegis.ErrInvalid.
func Landed(ctx context.Context, db Querier, resource string, lease aegis.Lease) (bool, error) {
	return std.Landed(ctx, db, resource, lease)
}

// Landed is the package function Landed on f's tables.
func (f *Fence) Landed(ctx context.Context, db Querier, resource string, lease aegis.Lease) (bool, error) {
	if db == nil {
		return false, fmt.Errorf("%w: fence: landed: db is nil", aegis.ErrInvalid)
	}
	if err := validate(resource, lease.Token); err != nil {
		return false, err
	}
	return landed(f.t, db.QueryRow(ctx, f.t.sql(recordedSQL), resource), resource, lease)
}

// LandedSQL is Landed through database/sql (PostgreSQL or SQLite).
func LandedSQL(ctx context.Context, db *sql.DB, resource string, lease aegis.Lease) (bool, error) {
	return std.LandedSQL(ctx, db, resource, lease)
}

// LandedSQL is the package function LandedSQL on f's tables.
func (f *Fence) LandedSQL(ctx context.Context, db *sql.DB, resource string, lease aegis.Lease) (bool, error) {
	if db == nil {
		return false, fmt.Errorf("%w: fence: landed: db is nil", aegis.ErrInvalid)
	}
	if err := validate(resource, lease.Token); err != nil {
		return false, err
	}
	return landed(f.t, db.QueryRowContext(ctx, f.t.sql(recordedSQL), resource), resource, lease)
}

func landed(t tables, row scanner, resource string, lease aegis.Lease) (bool, error) {
	var token int64
	var hash sql.NullString
	err := row.Scan(&token, &hash)
	switch {
	case errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, checkErr(t, resource, err)
	case aegis.Token(token) != lease.Token:
		return false, nil
	case lease.Owner == "":
		return !hash.Valid, nil
	}
	return hash.Valid && hash.String == ownerHash(lease.Owner), nil
}
