package errtext_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// FuzzStored writes Clean(s), and ASCII's fallback for s, where the queue
// and the scheduler write an outcome's text: a PostgreSQL text column, a
// jsonb value built from it (the queue's attempt errors) and a SQLite text
// column. Each store takes it and reads it back unchanged: what Clean
// promises, and what an outcome write rests on.
func FuzzStored(f *testing.F) {
	for _, s := range []string{"", "boom", "do not retry: \x00", "\xff\xfe", "\xed\xa0\x80", "\u2028\ufeff\U0010ffff", `"\u0000"`, "a\rb\n\t", strings.Repeat("\x00", 5000), strings.Repeat("é", 2049)} {
		f.Add(s)
	}
	ctx := context.Background()
	pg := testenv.PostgresSQL(f)
	_, err := pg.ExecContext(ctx, `CREATE TABLE outcome (id int PRIMARY KEY, error text NOT NULL, errors jsonb NOT NULL)`)
	require.NoError(f, err)
	lite, err := sqlitelease.Open(filepath.Join(f.TempDir(), "errtext.db"))
	require.NoError(f, err)
	f.Cleanup(func() { lite.Close() })
	_, err = lite.ExecContext(ctx, `CREATE TABLE outcome (id integer PRIMARY KEY, error text NOT NULL)`)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) {
		for _, text := range []string{errtext.Clean(s), errtext.ASCII(s, errors.New("refused"))} {
			var back, inJSON string
			err := pg.QueryRowContext(ctx, `INSERT INTO outcome VALUES (1, $1, jsonb_build_array(jsonb_build_object('error', $1::text)))
				ON CONFLICT (id) DO UPDATE SET error = excluded.error, errors = excluded.errors
				RETURNING error, errors->0->>'error'`, text).Scan(&back, &inJSON)
			require.NoError(t, err, "PostgreSQL takes %q", text)
			require.Equal(t, text, back, "PostgreSQL's text column")
			require.Equal(t, text, inJSON, "PostgreSQL's jsonb")

			err = lite.QueryRowContext(ctx, `INSERT INTO outcome VALUES (1, ?)
				ON CONFLICT (id) DO UPDATE SET error = excluded.error RETURNING error`, text).Scan(&back)
			require.NoError(t, err, "SQLite takes %q", text)
			require.Equal(t, text, back, "SQLite's text column")
		}
	})
}
