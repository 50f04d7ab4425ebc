package fence

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis/internal/tool/failpoint"
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
