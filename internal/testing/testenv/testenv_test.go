package testenv

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/servers"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(slotChildEnv); dir != "" {
		slotChild(dir)
	}
	goleak.VerifyTestMain(m)
}

func TestPostgresSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := Postgres(t), Postgres(t)
	_, err := a.Exec(ctx, "create table things (id int primary key)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "insert into things values (1)")
	require.NoError(t, err)
	// The same unqualified name is another table in b's schema.
	_, err = b.Exec(ctx, "create table things (id int primary key)")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, "select count(*) from things").Scan(&n))
	require.Zero(t, n)

	var pathA, pathB string
	require.NoError(t, a.QueryRow(ctx, "show search_path").Scan(&pathA))
	require.NoError(t, b.QueryRow(ctx, "show search_path").Scan(&pathB))
	require.NotEqual(t, pathA, pathB)
	require.True(t, strings.HasPrefix(pathA, "t_testpostgresschemasareisolated_"), pathA)
}

func TestPostgresURLAndSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := PostgresURL(t)
	require.Contains(t, u, "options=")
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var path string
	require.NoError(t, conn.QueryRow(ctx, "show search_path").Scan(&path))
	require.Regexp(t, `^t_testpostgresurlandsql_[0-9a-f]{8}$`, path)
	_, err = conn.Exec(ctx, "create table t (v int)")
	require.NoError(t, err)
	var schema string
	require.NoError(t, conn.QueryRow(ctx, "select schemaname from pg_tables where tablename = 't' and schemaname = $1", path).Scan(&schema))

	require.Equal(t, u, PostgresURL(t), "one test, one URL")
	t.Run("sub", func(t *testing.T) {
		require.NotEqual(t, u, PostgresURL(t), "a subtest gets its own schema")
	})

	db := PostgresSQL(t)
	require.NoError(t, db.QueryRowContext(ctx, "show search_path").Scan(&path))
	require.Regexp(t, `^t_testpostgresurlandsql_[0-9a-f]{8}$`, path)
}

func TestPostgresSchemaDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var schema string
	t.Run("inner", func(t *testing.T) {
		pool := Postgres(t)
		require.NoError(t, pool.QueryRow(ctx, "show search_path").Scan(&schema))
		_, err := pool.Exec(ctx, "create table t (v int)")
		require.NoError(t, err)
	})
	conn, err := pgx.Connect(ctx, lookup(servers.EnvPostgresURL))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select count(*) from pg_namespace where nspname = $1", schema).Scan(&n))
	require.Zero(t, n, "schema %s survived its test", schema)
}

func TestRedisEtcdZooKeeper(t *testing.T) {
	t.Parallel()
	require.Len(t, RedisAddrs(t), 6)
	eps := EtcdEndpoints(t)
	require.Len(t, eps, 3)
	for _, e := range eps {
		require.True(t, strings.HasPrefix(e, "http://"), e)
	}
	require.Len(t, ZKServers(t), 3)
}

func TestNATS(t *testing.T) {
	t.Parallel()
	urls := NATSURLs(t)
	require.Len(t, urls, 3)
	for _, u := range urls {
		require.True(t, strings.HasPrefix(u, "nats://"), u)
	}
}

// TestUnreachableNATSFails: a NATS cluster that does not answer fails the
// test (never skips it), naming the variable, as every server kind does.
func TestUnreachableNATSFails(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNeedsNATS$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AEGIS_TESTENV_HELPER=1", servers.EnvNATSURLs+"=nats://"+addr)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the test passed without its server:\n%s", out)
	require.Contains(t, string(out), "NATS server at "+addr)
	require.Contains(t, string(out), "from AEGIS_NATS_URLS")
	require.NotRegexp(t, regexp.MustCompile(`(?m)^--- SKIP`), string(out))
}

func TestHelperNeedsNATS(t *testing.T) {
	if os.Getenv("AEGIS_TESTENV_HELPER") == "" {
		return
	}
	NATSURLs(t)
}

func TestKey(t *testing.T) {
	t.Parallel()
	t.Run("sub/case 1", func(t *testing.T) {
		a, b := Key(t), Key(t)
		require.NotEqual(t, a, b)
		require.Regexp(t, `^TestKey_sub_case_1-[0-9a-f]{8}$`, a)
	})
	long := sanitize(strings.Repeat("x", 300), 80)
	require.Len(t, long, 80)
	require.Equal(t, "t_a_b_c_", schemaName("A-b.C")[:8])
}

// TestUnreachableServerFails runs a test against a closed port in a child
// process and checks that it fails fast with a message that says what to do.
func TestUnreachableServerFails(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNeedsRedis$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AEGIS_TESTENV_HELPER=1", servers.EnvRedisAddrs+"="+addr)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the test passed without its server:\n%s", out)
	require.Less(t, time.Since(start), 10*time.Second)
	for _, want := range []string{
		"Redis server at " + addr,
		"from AEGIS_REDIS_ADDRS",
		"scripts/services start",
		"make test",
	} {
		require.Contains(t, string(out), want)
	}
	require.NotRegexp(t, regexp.MustCompile(`(?m)^--- SKIP`), string(out))
}

func TestHelperNeedsRedis(t *testing.T) {
	if os.Getenv("AEGIS_TESTENV_HELPER") != "1" {
		return // only run as TestUnreachableServerFails's child
	}
	RedisAddrs(t)
	t.Log("unreachable: " + strconv.Quote("not reached"))
}

func TestSameJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a": [1, 2.50, "x", null, true]}`, `{"a":[1,2.5,"x",null,true]}`, true},
		{`{"a":1,"a":2}`, `{"a":2}`, true},
		{`1e3`, `1000`, true},
		{`"\u00e9"`, `"é"`, true},
		{`1e100000`, `1E+100000`, true},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`0.1`, `0.10000000000000001`, false},
		{`{}`, `[]`, false},
		{`{"a":1}`, `{"b":1}`, false},
		{`null`, `false`, false},
	} {
		same, err := SameJSON([]byte(c.a), []byte(c.b))
		require.NoError(t, err)
		require.Equal(t, c.same, same, "%s and %s", c.a, c.b)
	}
	for _, bad := range []string{``, `{`, `1 2`} {
		_, err := SameJSON([]byte(bad), []byte(`1`))
		require.Error(t, err, "%q", bad)
	}
}
