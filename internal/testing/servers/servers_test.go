package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks, after the tests passed, that they left no goroutine
// and no process behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && os.Getenv(helperEnv) == "" {
		if kids := children(); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "servers: tests left processes behind: %s\n", strings.Join(kids, "; "))
			code = 1
		}
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "servers: tests left goroutines behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// children lists this process's child processes from /proc.
func children() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			out = append(out, fmt.Sprintf("pid %d state %s: %s", pid, f[0], strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return out
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// requireGone checks that p left nothing behind: no process, no pid file,
// its ports free.
func requireGone(t *testing.T, p *Proc) {
	t.Helper()
	require.False(t, p.Running(), "%s still running", p)
	require.Zero(t, p.Pid())
	require.NoFileExists(t, filepath.Join(p.Dir(), pidFile))
	for _, port := range p.ports {
		require.NoError(t, checkPortFree(port), "%s: port %d", p, port)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg, err := StartPostgres(ctx, filepath.Join(t.TempDir(), "postgres"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })

	query := func(sql string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, pg.URL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		var s string
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&s))
		return s
	}
	require.Equal(t, "aegis", query("select current_user || ''"))
	require.Equal(t, "aegis", query("select current_database() || ''"))
	require.Equal(t, "off", query("show fsync"))
	require.Equal(t, "off", query("show synchronous_commit"))
	require.Equal(t, "1000", query("show max_connections"))
	if os.Geteuid() == 0 {
		require.Equal(t, "postgres", query("select usename || '' from pg_user where usesysid = (select datdba from pg_database where datname = 'postgres')"))
	}
	conn, err := pgx.Connect(ctx, pg.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "create table kept (v text); insert into kept values ('yes')")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	// Restart keeps the data, on the same port.
	port := pg.Port()
	require.NoError(t, pg.Restart(ctx))
	require.Equal(t, port, pg.Port())
	require.Equal(t, "yes", query("select v from kept"))

	// Stop, Wipe, Start: empty again.
	require.NoError(t, pg.Stop())
	requireGone(t, pg.Proc)
	require.NoError(t, pg.Wipe())
	require.NoError(t, pg.Start(ctx))
	require.Equal(t, "0", query("select count(*)::text from pg_tables where tablename = 'kept'"))

	require.NoError(t, pg.Stop())
	requireGone(t, pg.Proc)
}

// A durable server keeps every commit across a SIGKILL of all its
// processes: it restarts on the same port and data, replays its WAL, and
// the rows are there.
func TestPostgresDurableSurvivesKill(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg, err := StartPostgres(ctx, filepath.Join(t.TempDir(), "postgres"), &PostgresConfig{Durable: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	conn, err := pgx.Connect(ctx, pg.URL())
	require.NoError(t, err)
	for _, setting := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
		var v string
		require.NoError(t, conn.QueryRow(ctx, "show "+setting).Scan(&v))
		require.Equal(t, "on", v, setting)
	}
	_, err = conn.Exec(ctx, "create table kept (n int); insert into kept select generate_series(1, 1000)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	// A backend leads its own session: Kill ends it too, or it would hold
	// the shared memory and the restart would be refused.
	idle, err := pgx.Connect(ctx, pg.URL())
	require.NoError(t, err)
	defer idle.Close(context.Background())
	var backend int
	require.NoError(t, idle.QueryRow(ctx, "select pg_backend_pid()").Scan(&backend))
	port, pid := pg.Port(), pg.Pid()
	require.NoError(t, pg.Kill())
	require.False(t, pg.Running())
	if state, _, err := processStat(backend); err == nil {
		require.Equal(t, byte('Z'), state, "backend %d outlived the kill", backend)
	}
	require.NoError(t, pg.Start(ctx))
	require.Equal(t, port, pg.Port())
	require.NotEqual(t, pid, pg.Pid())
	conn, err = pgx.Connect(ctx, pg.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select count(*) from kept").Scan(&n))
	require.Equal(t, 1000, n, "every committed row survives the crash")
	b, err := os.ReadFile(pg.LogPath())
	require.NoError(t, err)
	require.Contains(t, string(b), "database system was interrupted", "the restart ran crash recovery")
}

func TestRedisLifecycle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	primary, err := StartRedis(ctx, filepath.Join(dir, "redis-1"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	replica, err := StartRedis(ctx, filepath.Join(dir, "redis-2"), &RedisConfig{
		ReplicaOf: primary.Addr(),
		Config:    map[string]string{"notify-keyspace-events": "KEA"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Stop() })
	require.Equal(t, "redis-1", primary.Name())

	do := func(r *Redis, args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return RedisCommand(cctx, r.Addr(), args...)
	}
	_, err = do(primary, "SET", "k", "v")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := do(replica, "GET", "k")
		return err == nil && v == "v"
	}, 10*time.Second, 20*time.Millisecond, "replica never got the key")
	events, err := do(replica, "CONFIG", "GET", "notify-keyspace-events")
	require.NoError(t, err)
	require.Contains(t, events, "AKE")

	// Pause: the kernel still accepts connections, nothing answers.
	require.NoError(t, primary.Pause())
	_, err = do(primary, "PING")
	require.Error(t, err)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)
	require.NoError(t, primary.Resume())
	pong, err := do(primary, "PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)

	// Kill is a crash; a restart without persistence starts empty.
	port := primary.Port()
	require.NoError(t, primary.Kill())
	requireGone(t, primary.Proc)
	require.NoError(t, primary.Start(ctx))
	require.Equal(t, port, primary.Port())
	v, err := do(primary, "GET", "k")
	require.NoError(t, err)
	require.Empty(t, v)

	require.NoError(t, replica.Stop())
	require.NoError(t, primary.Stop())
	requireGone(t, primary.Proc)
	requireGone(t, replica.Proc)
}

func TestEtcdLeaderKill(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e, err := StartEtcd(ctx, t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Stop() })
	require.Len(t, e.Members(), 3)
	require.Len(t, e.Endpoints(), 3)
	require.True(t, strings.HasPrefix(e.Endpoints()[0], "http://127.0.0.1:"))

	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	require.NoError(t, leader.Kill())
	requireGone(t, leader)
	var next *Proc
	require.Eventually(t, func() bool {
		next, err = e.Leader(ctx)
		return err == nil && next != leader
	}, 10*time.Second, 20*time.Millisecond, "no new leader after killing %s", leader)

	require.NoError(t, e.Heal(ctx))
	require.True(t, leader.Running())
	for _, m := range e.Members() {
		require.NoError(t, probeEtcd(ctx, m.Addr()), m.Name())
	}
	require.NoError(t, e.Stop())
	for _, m := range e.Members() {
		requireGone(t, m)
	}
}

func TestZooKeeper(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	z, err := StartZooKeeper(ctx, t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = z.Stop() })
	require.Len(t, z.Addrs(), 3)
	for _, m := range z.Members() {
		out, err := ZooKeeperCommand(ctx, m.Addr(), "ruok")
		require.NoError(t, err)
		require.Equal(t, "imok", out)
		out, err = ZooKeeperCommand(ctx, m.Addr(), "mntr")
		require.NoError(t, err)
		require.True(t, strings.Contains(out, "zk_server_state"), "mntr answered %.200q", out)
		out, err = ZooKeeperCommand(ctx, m.Addr(), "conf")
		require.NoError(t, err)
		require.True(t, strings.Contains(out, "minSessionTimeout=400"), "conf answered %.400q", out)
	}
	leader, err := z.Leader(ctx)
	require.NoError(t, err)

	// Kill a follower: the ensemble keeps its leader; Heal brings it back.
	var follower *Proc
	for _, m := range z.Members() {
		if m != leader {
			follower = m
			break
		}
	}
	require.NoError(t, follower.Kill())
	requireGone(t, follower)
	l, err := z.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, leader, l)
	require.NoError(t, z.Heal(ctx))
	require.NoError(t, probeZooKeeper(ctx, follower.Addr()))

	require.NoError(t, z.Stop())
	for _, m := range z.Members() {
		requireGone(t, m)
	}
}

func TestDetachedAdoptInspectStopDir(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	rdir := filepath.Join(dir, "redis-1")
	first, err := StartRedis(ctx, rdir, &RedisConfig{Detach: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Kill() })
	require.False(t, first.Reused())

	// A second detached start adopts the running server.
	second, err := StartRedis(ctx, rdir, &RedisConfig{Port: first.Port(), Detach: true})
	require.NoError(t, err)
	require.True(t, second.Reused())
	require.Equal(t, first.Pid(), second.Pid())

	// A start that is not detached refuses to run a second server there.
	_, err = StartRedis(ctx, rdir, nil)
	require.ErrorContains(t, err, "already running")

	st, err := Inspect(ctx, dir)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Equal(t, StateHealthy, st[0].State)
	require.Equal(t, first.Addr(), st[0].Addr)
	require.Equal(t, "redis-1", st[0].Name)

	require.NoError(t, first.Pause())
	st, err = Inspect(ctx, dir, KindRedis)
	require.NoError(t, err)
	require.Equal(t, StatePaused, st[0].State)

	require.NoError(t, StopDir(dir)) // resumes it to stop it
	require.False(t, first.Running())
	st, err = Inspect(ctx, dir)
	require.NoError(t, err)
	require.Empty(t, st)
	require.NoError(t, checkPortFree(first.Port()))
}

func TestStartFailureNamesServerAndLog(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, err := StartRedis(ctx, t.TempDir(), &RedisConfig{Config: map[string]string{"no-such-directive": "x"}})
	var se *StartError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "redis", se.Name)
	require.Contains(t, err.Error(), "redis on 127.0.0.1:")
	require.Contains(t, err.Error(), "exited while starting")
	require.Contains(t, err.Error(), "no-such-directive") // from the log's tail
	require.Contains(t, err.Error(), "redis.log")
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = StartRedis(testContext(t), t.TempDir(), &RedisConfig{Port: port})
	require.ErrorIs(t, err, errPortInUse)
	require.ErrorContains(t, err, "127.0.0.1:"+strconv.Itoa(port))
}

func TestMissingProgram(t *testing.T) {
	t.Parallel()
	_, err := lookProgram(KindRedis, "aegis-no-such-server", "aegis-pkg", "/nonexistent")
	require.True(t, IsMissing(err))
	require.ErrorContains(t, err, "aegis-no-such-server")
	require.ErrorContains(t, err, "Debian package aegis-pkg")
	require.ErrorContains(t, err, "scripts/services install")
}

func TestSharedEnv(t *testing.T) {
	t.Parallel()
	want := [][2]string{
		{"AEGIS_POSTGRES_URL", "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable"},
		{"AEGIS_REDIS_ADDRS", "127.0.0.1:16379,127.0.0.1:16380,127.0.0.1:16381,127.0.0.1:16382,127.0.0.1:16383,127.0.0.1:16384"},
		{"AEGIS_ETCD_ENDPOINTS", "http://127.0.0.1:12379,http://127.0.0.1:12381,http://127.0.0.1:12383"},
		{"AEGIS_ZK_SERVERS", "127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183"},
		{"AEGIS_NATS_URLS", "nats://127.0.0.1:14222,nats://127.0.0.1:14223,nats://127.0.0.1:14224"},
	}
	require.Equal(t, want, SharedEnv())
}

func TestParseKind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Kind{"postgres": KindPostgres, "pg": KindPostgres, "Redis": KindRedis, "etcd": KindEtcd, "zk": KindZooKeeper, "zookeeper": KindZooKeeper, "nats": KindNATS} {
		got, err := ParseKind(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := ParseKind("mysql")
	require.ErrorContains(t, err, `"mysql"`)
}

func TestFreePorts(t *testing.T) {
	t.Parallel()
	ports, err := FreePorts(9)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p])
		seen[p] = true
		require.GreaterOrEqual(t, p, pickLo)
		require.Less(t, p, pickHi)
	}
}

const helperEnv = "AEGIS_SERVERS_HELPER_DIR"

// TestServerDiesWithItsStarter kills (SIGKILL) a process that started a
// Redis server and checks that the server dies too: a crashed test binary
// or lab leaves nothing running.
func TestServerDiesWithItsStarter(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartRedisAndWait$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var pid int
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if n, ok := strings.CutPrefix(lines.Text(), "redis pid "); ok {
			pid, err = strconv.Atoi(n)
			require.NoError(t, err)
			break
		}
	}
	require.NotZero(t, pid, "the helper did not start redis")
	state, _, err := processStat(pid)
	require.NoError(t, err)
	require.NotEqual(t, byte('Z'), state)

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool {
		state, _, err := processStat(pid)
		return err != nil || state == 'Z' // a zombie of an init that does not reap
	}, 10*time.Second, 10*time.Millisecond, "redis (pid %d) outlived the process that started it", pid)
}

func TestHelperStartRedisAndWait(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		return // only run as TestServerDiesWithItsStarter's child
	}
	r, err := StartRedis(context.Background(), dir, nil)
	require.NoError(t, err)
	fmt.Printf("redis pid %d\n", r.Pid())
	time.Sleep(time.Minute) // until the parent kills us
}

func TestRemoveStaleLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	live := filepath.Join(dir, "live.pid")
	require.NoError(t, os.WriteFile(live, []byte(strconv.Itoa(os.Getpid())+"\n/data\n"), 0o644))
	require.NoError(t, removeStaleLock(live))
	require.FileExists(t, live, "the lock of a live process was removed")

	cmd := exec.Command("true")
	require.NoError(t, cmd.Run()) // reaped: its pid names no process now
	stale := filepath.Join(dir, "stale.pid")
	require.NoError(t, os.WriteFile(stale, []byte(strconv.Itoa(cmd.Process.Pid)+"\n/data\n"), 0o644))
	require.NoError(t, removeStaleLock(stale))
	require.NoFileExists(t, stale)

	require.NoError(t, removeStaleLock(filepath.Join(dir, "missing.pid")))
}
