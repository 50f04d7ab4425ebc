package testenv_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestExampleUsage is docs/servers.md's "How tests find them", as printed
// there, then what each value is.
func TestExampleUsage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	pool := testenv.Postgres(t)     // *pgxpool.Pool in a fresh schema (search_path), dropped at cleanup
	db := testenv.PostgresSQL(t)    // *sql.DB, same
	url := testenv.PostgresURL(t)   // a URL (options=-csearch_path=…) for the test's own schema: the same for every call in one test
	addrs := testenv.RedisAddrs(t)  // []string host:port
	eps := testenv.EtcdEndpoints(t) // []string http://host:port
	zks := testenv.ZKServers(t)     // []string host:port
	key := testenv.Key(t)           // "TestName_sub-1f2e3d4c": prefix every shared key with it

	var a, b string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_schema()").Scan(&a))
	require.NoError(t, db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&b))
	require.NotEqual(t, a, b, "each call, another schema")
	require.Equal(t, url, testenv.PostgresURL(t), "one URL per test")
	require.Contains(t, mustQuery(t, url).Get("options"), "search_path=")
	require.NotEmpty(t, addrs)
	require.NotEmpty(t, zks)
	for _, e := range eps {
		require.True(t, strings.HasPrefix(e, "http://"), e)
	}
	require.True(t, strings.HasPrefix(key, "TestExampleUsage"), key)
}

func mustQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Query()
}
