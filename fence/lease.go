package fence

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/tracing"
)

// CheckLease records lease.Token for resource inside tx, with a one-way
// hash of lease.Owner beside it. A greater token than the recorded one
// lands; an equal token lands only from the owner that recorded it (one
// holder writing several times). A lower token, or an equal token from
// another owner, writes nothing and returns an error wrapping
// aegis.ErrStale; the caller rolls back. So two holders granted the same
// token (a Redis failover that sent the counter back, a Redlock majority
// restarted without fsync) cannot both commit: the first to write wins, and
// the other's transaction, blocked on the fence row until then, is refused.
//
// Use CheckLease for the token of a lease from any Locker (pass
// Held.Lease()), and Check for a token that comes without one. An equal
// token that a bare Check recorded is refused here too: Check records no
// owner, so nothing shows the two writes come from one holder.
//
// The owner itself is never stored, logged or put into an error. Bad input
// is an error wrapping aegis.ErrInvalid, returned before any SQL is sent: a
// nil tx, an empty lease.Owner, a lease.Token that is not positive, a
// resource Check would refuse. When the fence table is missing, or predates
// the owner column, the error says to run Migrate.
func CheckLease(ctx context.Context, tx pgx.Tx, resource string, lease aegis.Lease) (err error) {
	return std.CheckLease(ctx, tx, resource, lease)
}

// CheckLease is the package function CheckLease on f's tables.
func (f *Fence) CheckLease(ctx context.Context, tx pgx.Tx, resource string, lease aegis.Lease) (err error) {
	ctx, span := startCheck(ctx, resource, lease.Token, tracing.Key(lease.Key))
	defer endCheck(span, &err)
	if tx == nil {
		return fmt.Errorf("%w: fence: check lease: tx is nil", aegis.ErrInvalid)
	}
	if err := validateLease(resource, lease); err != nil {
		return err
	}
	err = check(ctx, f.t, pgxTx{tx}, resource, lease.Token, ownerHash(lease.Owner))
	if se, ok := errors.AsType[*StaleError](err); ok {
		recordPgx(ctx, f.t, tx, se, lease.Key)
	}
	return err
}

// CheckLeaseSQL is CheckLease for a database/sql transaction (PostgreSQL
// or SQLite), with the same validation.
func CheckLeaseSQL(ctx context.Context, tx *sql.Tx, resource string, lease aegis.Lease) (err error) {
	return std.CheckLeaseSQL(ctx, tx, resource, lease)
}

// CheckLeaseSQL is the package function CheckLeaseSQL on f's tables.
func (f *Fence) CheckLeaseSQL(ctx context.Context, tx *sql.Tx, resource string, lease aegis.Lease) (err error) {
	ctx, span := startCheck(ctx, resource, lease.Token, tracing.Key(lease.Key))
	defer endCheck(span, &err)
	if tx == nil {
		return fmt.Errorf("%w: fence: check lease: tx is nil", aegis.ErrInvalid)
	}
	if err := validateLease(resource, lease); err != nil {
		return err
	}
	err = check(ctx, f.t, sqlTx{tx}, resource, lease.Token, ownerHash(lease.Owner))
	if se, ok := errors.AsType[*StaleError](err); ok {
		recordSQL(ctx, f.t, tx, se, lease.Key)
	}
	return err
}

func validateLease(resource string, lease aegis.Lease) error {
	if err := validate(resource, lease.Token); err != nil {
		return err
	}
	if lease.Owner == "" {
		return fmt.Errorf("%w: fence: lease %q token %d has no owner: pass the lease a Locker granted", aegis.ErrInvalid, lease.Key, lease.Token)
	}
	return nil
}

// ownerHash is what the fence records of an owner: the hex SHA-256 of it.
// One-way, because for Redis the owner is the secret that renews and
// releases the lease, and the fence table is read by more people than the
// lease store; owners are 128 random bits, so the hash cannot be reversed
// by guessing. Not truncated: the 64 characters cost little on a row per
// resource, and the full hash needs no argument about how unlikely two
// owners' prefixes are to collide.
func ownerHash(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:])
}

// querier is what check needs of a transaction, pgx's or database/sql's.
type querier interface {
	exec(ctx context.Context, query string, args ...any) (int64, error)
	queryRow(ctx context.Context, query string, args ...any) scanner
}

type scanner interface{ Scan(dest ...any) error }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) queryRow(ctx context.Context, query string, args ...any) scanner {
	return t.tx.QueryRow(ctx, query, args...)
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) queryRow(ctx context.Context, query string, args ...any) scanner {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// check runs the fence's one statement: checkSQL for a bare token (hash
// ""), checkLeaseSQL for a lease's.
func check(ctx context.Context, tb tables, t querier, resource string, token aegis.Token, hash string) error {
	var n int64
	var err error
	if hash == "" {
		n, err = t.exec(ctx, tb.sql(checkSQL), resource, int64(token))
	} else {
		n, err = t.exec(ctx, tb.sql(checkLeaseSQL), resource, int64(token), hash)
	}
	if err != nil {
		return checkErr(tb, resource, err)
	}
	if n > 0 {
		return nil
	}
	return refused(ctx, tb, t, resource, token, hash)
}

// StaleError is the error of a check the fence refused: it wraps
// aegis.ErrStale (errors.Is works as for the bare sentinel) and says which
// token the fence table held for the resource when it refused, for a
// caller that shows why (errors.As). It never carries an owner or its hash.
type StaleError struct {
	Resource string
	// Token is the token refused.
	Token aegis.Token
	// Held is the token the fence table recorded for Resource when it
	// refused Token, read in the same transaction: greater than Token, or
	// equal to it and recorded by another owner (or bare, by Check). 0 when
	// it could not be read.
	Held aegis.Token
	// Recorded reports that the fence recorded this refusal itself, in the
	// refusal log and the refusal table (a write of its own, on another
	// connection: the refused transaction rolls back). CountRefusal then
	// counts nothing more.
	Recorded bool
	// RecordErr says why the refusal could not be recorded, when it could
	// not (it wraps ErrNotRecorded); nil otherwise. The refusal stands.
	RecordErr error
	reason    string
}

func (e *StaleError) Error() string {
	if e.RecordErr != nil {
		return aegis.ErrStale.Error() + ": " + e.reason + " (" + e.RecordErr.Error() + ")"
	}
	return aegis.ErrStale.Error() + ": " + e.reason
}

// Unwrap returns aegis.ErrStale.
func (e *StaleError) Unwrap() error { return aegis.ErrStale }

// refused is the ErrStale of a check that wrote nothing, saying which rule
// refused it: the user who mixes Check and CheckLease on one resource reads
// that, not a puzzling "greater token". It names tokens, never an owner or
// its hash.
func refused(ctx context.Context, tb tables, t querier, resource string, token aegis.Token, hash string) error {
	var recorded int64
	var recordedHash sql.NullString
	e := &StaleError{Resource: resource, Token: token}
	if err := t.queryRow(ctx, tb.sql(recordedSQL), resource).Scan(&recorded, &recordedHash); err != nil {
		e.reason = fmt.Sprintf("resource %q refused token %d (reading why: %v)", resource, token, err)
		return e
	}
	e.Held = aegis.Token(recorded)
	switch {
	case recorded > int64(token):
		e.reason = fmt.Sprintf("resource %q already accepted a token greater than %d", resource, token)
	case recorded < int64(token):
		// Not seen in practice: the refusing upsert locked the row
		// (PostgreSQL) or holds the write lock (SQLite) until the end of
		// the transaction, so it takes a row deleted and re-created by hand.
		e.reason = fmt.Sprintf("resource %q refused token %d", resource, token)
	case hash == "":
		e.reason = fmt.Sprintf("resource %q accepted token %d through fence.CheckLease: a bare fence.Check cannot show it comes from that lease's owner (pass the lease to CheckLease)", resource, token)
	case !recordedHash.Valid:
		e.reason = fmt.Sprintf("resource %q accepted token %d through fence.Check, which records no owner: CheckLease cannot show it is the same holder (fence each resource through one of them)", resource, token)
	default:
		e.reason = fmt.Sprintf("resource %q already accepted token %d from another owner", resource, token)
	}
	return e
}
