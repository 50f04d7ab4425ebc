package fence

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis/internal/testing/failpoint"
)

// RecordPgxThrough makes the connections of the records of pgx refusals
// fail as p's rules say, until restore. Not for parallel tests: it is the
// process's.
func RecordPgxThrough(p *failpoint.Plan) (restore func()) {
	old := dialPgx
	dialPgx = func(ctx context.Context, cfg *pgx.ConnConfig) (pgxHandle, func(), error) {
		h, done, err := old(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return p.Pgx(h.(failpoint.PgxDB)), done, nil
	}
	return func() { dialPgx = old }
}

// HoldRecordPgxDials makes the connections of the records of pgx
// refusals wait, once they hold their slot of the process's bound, until
// release is closed; each says so on entered first. Not for parallel tests.
func HoldRecordPgxDials(entered chan<- struct{}, release <-chan struct{}) (restore func()) {
	old := dialPgx
	dialPgx = func(ctx context.Context, cfg *pgx.ConnConfig) (pgxHandle, func(), error) {
		entered <- struct{}{}
		// Held past the record's own 2s bound on purpose; a test that never
		// releases fails here instead of hanging.
		select {
		case <-release:
		case <-time.After(time.Minute):
			return nil, nil, errors.New("HoldRecordPgxDials: the test did not release the record within a minute")
		}
		return old(ctx, cfg)
	}
	return func() { dialPgx = old }
}
