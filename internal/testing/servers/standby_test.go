package servers

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// readOnlySQLTransaction is SQLSTATE 25006, read_only_sql_transaction.
const readOnlySQLTransaction = "25006"

func TestStandbyReplicatesRefusesWritesAndPromotes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	primary, err := StartPostgres(ctx, filepath.Join(dir, "postgres-primary"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	_, err = StartStandby(ctx, filepath.Join(dir, "postgres-few"), primary, &PostgresConfig{MaxConnections: 10})
	require.ErrorContains(t, err, "PostgresConfig.MaxConnections is 10")
	standby, err := StartStandby(ctx, filepath.Join(dir, "postgres-standby"), primary, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })
	require.Equal(t, "postgres-standby", standby.Name())
	require.NotEqual(t, primary.Port(), standby.Port())
	require.Equal(t, "postgres://aegis@"+standby.Addr()+"/aegis?sslmode=disable", standby.URL())

	connect := func(p *Postgres) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, p.URL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
		return conn
	}
	inRecovery := func(conn *pgx.Conn) bool {
		t.Helper()
		var in bool
		require.NoError(t, conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&in))
		return in
	}
	requireReadOnly := func(err error, what string) {
		t.Helper()
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, what)
		require.Equal(t, readOnlySQLTransaction, pe.Code, "%s: %s", what, pe.Message)
	}

	pconn, sconn := connect(primary), connect(standby)
	require.False(t, inRecovery(pconn))
	require.True(t, inRecovery(sconn))
	var user, db string
	require.NoError(t, sconn.QueryRow(ctx, "select current_user::text, current_database()::text").Scan(&user, &db))
	require.Equal(t, []string{"aegis", "aegis"}, []string{user, db})

	// A row committed on the primary is read on the standby once replayed.
	_, err = pconn.Exec(ctx, "create table replicated (v text); insert into replicated values ('from the primary')")
	require.NoError(t, err)
	require.NoError(t, standby.WaitReplayed(ctx, primary))
	var v string
	require.NoError(t, sconn.QueryRow(ctx, "select v from replicated").Scan(&v))
	require.Equal(t, "from the primary", v)

	// A restarted standby is still one.
	require.NoError(t, standby.Restart(ctx))
	sconn = connect(standby)
	require.True(t, inRecovery(sconn))

	// The standby refuses writes and LISTEN with read_only_sql_transaction.
	_, err = sconn.Exec(ctx, "insert into replicated values ('from the standby')")
	requireReadOnly(err, "insert on the standby")
	_, err = sconn.Exec(ctx, "listen aegis_standby")
	requireReadOnly(err, "listen on the standby")

	// The primary is no standby: Promote says so and changes nothing.
	require.ErrorIs(t, primary.Promote(ctx), ErrNotStandby)
	require.ErrorIs(t, primary.WaitReplayed(ctx, standby), ErrNotStandby)
	require.False(t, inRecovery(pconn))

	// Promoted, the former standby takes writes, on a connection opened
	// while it was a standby too.
	require.NoError(t, standby.Promote(ctx))
	require.False(t, inRecovery(sconn))
	_, err = sconn.Exec(ctx, "insert into replicated values ('from the promoted standby')")
	require.NoError(t, err)
	var n int
	require.NoError(t, connect(standby).QueryRow(ctx, "select count(*) from replicated").Scan(&n))
	require.Equal(t, 2, n)
	require.ErrorIs(t, standby.Promote(ctx), ErrNotStandby)
	require.ErrorIs(t, standby.WaitReplayed(ctx, primary), ErrNotStandby)

	// Wipe, then Start: a standby again, of the primary's data.
	require.NoError(t, standby.Stop())
	require.NoError(t, standby.Wipe())
	require.NoError(t, standby.Start(ctx))
	sconn = connect(standby)
	require.True(t, inRecovery(sconn))
	require.NoError(t, sconn.QueryRow(ctx, "select count(*) from replicated").Scan(&n))
	require.Equal(t, 1, n)

	require.NoError(t, standby.Stop())
	requireGone(t, standby.Proc)
	require.NoError(t, primary.Stop())
	requireGone(t, primary.Proc)
}

func TestStartStandbyBadInput(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, err := StartStandby(ctx, t.TempDir(), nil, nil)
	require.ErrorContains(t, err, "primary is nil")
}

// A switchover right after a burst of commits loses none of them: the
// primary's fast shutdown sends its WAL to the standby, which replays it
// to the end before it is promoted (the test settings' synchronous_commit
// off leaves the last commits unsent until then). The old primary stays
// stopped.
func TestSwitchoverLosesNoCommit(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	primary, err := StartPostgres(ctx, filepath.Join(dir, "postgres-primary"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := StartStandby(ctx, filepath.Join(dir, "postgres-standby"), primary, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	conn, err := pgx.Connect(ctx, primary.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "create table switched (v int)")
	require.NoError(t, err)
	const commits = 300
	for i := range commits {
		_, err = conn.Exec(ctx, "insert into switched values ($1)", i)
		require.NoError(t, err)
	}
	_ = conn.Close(ctx)

	last, err := standby.Switchover(ctx, primary)
	require.NoError(t, err)
	require.Regexp(t, `^[0-9A-F]+/[0-9A-F]+$`, last)
	require.False(t, primary.Running(), "the old primary is stopped: nothing can write to it")
	sconn, err := pgx.Connect(ctx, standby.URL())
	require.NoError(t, err)
	defer sconn.Close(context.WithoutCancel(ctx))
	var n int
	var in bool
	require.NoError(t, sconn.QueryRow(ctx, "select count(*), pg_is_in_recovery() from switched").Scan(&n, &in))
	require.Equal(t, commits, n, "every commit of the old primary is on the new one")
	require.False(t, in, "the standby is promoted")
	_, err = sconn.Exec(ctx, "insert into switched values (-1)")
	require.NoError(t, err, "the new primary takes writes")

	// It is no standby any more: a second switchover stops nothing.
	_, err = standby.Switchover(ctx, primary)
	require.ErrorIs(t, err, ErrNotStandby)
	_, err = standby.Switchover(ctx, nil)
	require.ErrorContains(t, err, "primary is nil")
}
