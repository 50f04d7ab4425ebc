package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
)

// The seed's invoice export (lesson 36, "Practical Implementation"): one
// row per period is the exclusion, the row's fencing_token is the fence,
// and the PDF is written under a key that contains the token.
const (
	schemaSQL = `CREATE TABLE IF NOT EXISTS invoice_export (
	period        text        PRIMARY KEY, -- the invariant: one export per period
	status        text        NOT NULL,
	fencing_token bigint      NOT NULL,
	object_key    text,
	started_at    timestamptz NOT NULL,
	finished_at   timestamptz
)`
	// claimSQL: the winner's insert; a second scheduler gets a unique violation.
	claimSQL = `INSERT INTO invoice_export (period, status, fencing_token, started_at)
VALUES ($1, 'RUNNING', 1, now())
RETURNING fencing_token`
	// finishSQL is fenced: a worker whose token was superseded updates no row.
	finishSQL = `UPDATE invoice_export
SET status = 'FINISHED', object_key = $3, finished_at = now()
WHERE period = $1 AND fencing_token = $2 AND status = 'RUNNING'`
	// reapSQL advances the token in the same statement that reclaims, and
	// re-checks the age at write time.
	reapSQL = `UPDATE invoice_export
SET fencing_token = fencing_token + 1, started_at = now()
WHERE period = $1 AND status = 'RUNNING'
  AND started_at < now() - $2 * interval '1 microsecond'
RETURNING fencing_token`
	// stuckSQL is the runbook query.
	stuckSQL = `SELECT period, fencing_token, started_at FROM invoice_export
WHERE status = 'RUNNING' AND started_at < now() - $1 * interval '1 microsecond'`
)

// ErrClaimed is returned by Claim when another scheduler owns the period.
var ErrClaimed = errors.New("period already claimed by another scheduler")

// Exports runs invoice exports against PostgreSQL and an object store.
type Exports struct {
	DB      *pgxpool.Pool
	Objects fence.ObjectStore
}

// Migrate creates the invoice_export table.
func (e *Exports) Migrate(ctx context.Context) error {
	_, err := e.DB.Exec(ctx, schemaSQL)
	return err
}

// Claim inserts the period's row. The winner gets token 1; every other
// scheduler gets ErrClaimed, from the primary key's unique violation.
func (e *Exports) Claim(ctx context.Context, period string) (aegis.Token, error) {
	var token int64
	err := e.DB.QueryRow(ctx, claimSQL, period).Scan(&token)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return 0, ErrClaimed
	}
	if err != nil {
		return 0, fmt.Errorf("claim %s: %w", period, err)
	}
	return aegis.Token(token), nil
}

// Render produces the export's PDF. Here: a few bytes that name the token.
func Render(period string, token aegis.Token) []byte {
	return fmt.Appendf(nil, "%%PDF-1.7 invoice export %s, written under token %d\n", period, token)
}

// Upload writes the PDF under the key of its token; no other grant shares
// the key, so a stale upload can never replace the canonical object.
func (e *Exports) Upload(ctx context.Context, period string, token aegis.Token, pdf []byte) (string, error) {
	key, err := fence.TokenKey("exports/"+period, token, "pdf")
	if err != nil {
		return "", err
	}
	if err := e.Objects.Put(ctx, key, bytes.NewReader(pdf)); err != nil {
		return "", err
	}
	return key, nil
}

// Finish publishes key as the period's canonical export if token is still
// the period's token. A stale worker gets aegis.ErrStale, changes nothing,
// and deletes its own upload.
func (e *Exports) Finish(ctx context.Context, period string, token aegis.Token, key string) error {
	_, err := fence.Exec(ctx, e.DB, finishSQL, period, int64(token), key)
	if errors.Is(err, aegis.ErrStale) {
		if derr := e.Objects.Delete(ctx, key); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}

// Reap reclaims the period if its run started more than olderThan ago and
// is still RUNNING, advancing the token. ok is false when there was nothing
// to reclaim.
func (e *Exports) Reap(ctx context.Context, period string, olderThan time.Duration) (token aegis.Token, ok bool, err error) {
	var t int64
	err = e.DB.QueryRow(ctx, reapSQL, period, olderThan.Microseconds()).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reap %s: %w", period, err)
	}
	return aegis.Token(t), true, nil
}

// Stuck lists the runbook's "stuck RUNNING" periods.
func (e *Exports) Stuck(ctx context.Context, olderThan time.Duration) ([]string, error) {
	rows, err := e.DB.Query(ctx, stuckSQL, olderThan.Microseconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var p string
		var tok int64
		var at time.Time
		err := r.Scan(&p, &tok, &at)
		return fmt.Sprintf("%s token %d since %s", p, tok, at.Format(time.RFC3339)), err
	})
}

// State is the period's row.
type State struct {
	Status    string
	Token     aegis.Token
	ObjectKey string
}

// Get reads the period's row.
func (e *Exports) Get(ctx context.Context, period string) (State, error) {
	var s State
	var key *string
	err := e.DB.QueryRow(ctx, "SELECT status, fencing_token, object_key FROM invoice_export WHERE period = $1", period).
		Scan(&s.Status, &s.Token, &key)
	if key != nil {
		s.ObjectKey = *key
	}
	return s, err
}

// Sweep deletes the period's uploads that no row references and no holder
// can commit any more.
func (e *Exports) Sweep(ctx context.Context, period string) ([]string, error) {
	s, err := e.Get(ctx, period)
	if err != nil {
		return nil, err
	}
	return fence.Sweep(ctx, e.Objects, "exports/"+period, s.Token, func(k string) bool { return k == s.ObjectKey })
}
