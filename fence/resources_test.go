package fence_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// Tables sees the fence's tables appear with MigrateSQL, and Resources
// reads each resource's greatest accepted token, by name, in both
// dialects.
func TestResources(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var db *sql.DB
			if dialect == "postgres" {
				db = testenv.PostgresSQL(t)
			} else {
				var err error
				db, err = sqlitelease.Open(filepath.Join(t.TempDir(), "f.db"))
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
			}
			f, r, err := fence.Tables(ctx, db)
			require.NoError(t, err)
			require.False(t, f)
			require.False(t, r)
			logged, err := fence.LogTable(ctx, db)
			require.NoError(t, err)
			require.False(t, logged)
			require.NoError(t, fence.MigrateSQL(ctx, db))
			f, r, err = fence.Tables(ctx, db)
			require.NoError(t, err)
			require.True(t, f)
			require.True(t, r)
			logged, err = fence.LogTable(ctx, db)
			require.NoError(t, err)
			require.True(t, logged)

			for _, c := range []struct {
				resource string
				token    aegis.Token
			}{{"b", 3}, {"a", 5}, {"b", 7}, {"a", 4}} {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				if err := fence.CheckSQL(ctx, tx, c.resource, c.token); err != nil {
					require.ErrorIs(t, err, aegis.ErrStale)
					rollback(t, tx)
					continue
				}
				require.NoError(t, tx.Commit())
			}
			rs, err := fence.Resources(ctx, db, 0)
			require.NoError(t, err)
			require.Equal(t, []fence.Resource{{"a", 5}, {"b", 7}}, rs)
			rs, err = fence.Resources(ctx, db, 1)
			require.NoError(t, err)
			require.Equal(t, []fence.Resource{{"a", 5}}, rs)
			_, err = fence.Resources(ctx, nil, 1)
			require.ErrorIs(t, err, aegis.ErrInvalid)
		})
	}
}
