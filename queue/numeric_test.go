package queue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNumericAgreesWithPostgreSQL: numeric refuses a JSON number exactly
// when PostgreSQL's jsonb does (value overflows numeric format), at the
// edges of its digits and its scale, asked of the real server.
func TestNumericAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	p := pool(t)
	for _, n := range []string{
		"1", "-0", "0.5", "1e131071", "9.9e131071", "1e131072", "-1e131072", "99e131070", "0.001e131074",
		"1e-16383", "1e-16384", "0e-16384", "0.0e-16383", "1.5e-16383", "123e-16385", "0e999999",
		"0.00000e1", "1e2147483648", "0e2147483647", "0e1073741822", "0e1073741823", "0e-1073741824", "1E+5", "12e131068", "0.0012e131074", "0.0012e131075",
	} {
		var pgErr error
		var ignored string
		pgErr = p.QueryRow(t.Context(), `SELECT ($1::text)::jsonb::text`, `{"a":`+n+`}`).Scan(&ignored)
		err := numeric([]byte(n))
		require.Equal(t, pgErr == nil, err == nil, "%s: PostgreSQL says %v, numeric %v", n, pgErr, err)
	}
}
