package servers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresConfig configures [StartPostgres]. The zero value is usable.
type PostgresConfig struct {
	// Port is the TCP port on 127.0.0.1. Default: a free port.
	Port int
	// MaxConnections is max_connections. Default: 1000: two test suites
	// side by side, each with a dozen lab runs of several node processes
	// (a few pools each), pass 300.
	MaxConnections int
	// Settings are more postgresql.conf settings, written after the
	// defaults (so they win), each value quoted: {"log_statement": "all"}.
	Settings map[string]string
	// Detach runs the server in its own session so that it outlives the
	// caller, and makes the start idempotent: a healthy server already
	// running from dir is adopted. Default: false (the server gets SIGKILL
	// when the caller's process dies).
	Detach bool
	// StartTimeout bounds initdb plus the wait for the server to accept
	// connections. Default: 60 s.
	StartTimeout time.Duration
	// Durable turns fsync, synchronous_commit and full_page_writes on, as
	// a production server runs: a commit is in the WAL on disk before it
	// returns, so a SIGKILL of the server (or a crash of the machine)
	// loses nothing committed. Default: false, all three off for speed
	// (with synchronous_commit off, even a SIGKILL of the server alone can
	// lose the last commits of the WAL writer's delay).
	Durable bool
}

// Postgres is a PostgreSQL server with the superuser role aegis and the
// database aegis, trust authentication on 127.0.0.1 and, unless
// [PostgresConfig.Durable], durability turned off for speed (fsync,
// synchronous_commit and full_page_writes are off: a crash can lose
// committed data): a primary of [StartPostgres] or a hot standby of
// [StartStandby].
type Postgres struct {
	*Proc
}

// URL returns the connection URL of the database aegis as the role aegis:
// postgres://aegis@127.0.0.1:PORT/aegis?sslmode=disable.
func (p *Postgres) URL() string {
	return "postgres://aegis@" + p.Addr() + "/aegis?sslmode=disable"
}

// StartPostgres initializes a cluster in dir/data when there is none and
// starts PostgreSQL on it, with its log in dir/postgres.log and its Unix
// socket in dir (none when dir's path is too long for a socket). It returns
// once the role and database aegis exist and accept connections. cfg may
// be nil.
func StartPostgres(ctx context.Context, dir string, cfg *PostgresConfig) (*Postgres, error) {
	c := PostgresConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.MaxConnections = cmp.Or(c.MaxConnections, 1000)
	if c.MaxConnections < 1 {
		return nil, fmt.Errorf("servers: PostgresConfig.MaxConnections is %d, want at least 1", c.MaxConnections)
	}
	return startPostgres(ctx, dir, c, newPostgres)
}

// startPostgres starts the server that newServer builds on a free port
// (or c.Port), retrying on new ports when a picked one was taken.
func startPostgres(ctx context.Context, dir string, c PostgresConfig, newServer func(dir string, port int, c PostgresConfig) *Postgres) (*Postgres, error) {
	c.StartTimeout = cmp.Or(c.StartTimeout, 60*time.Second)
	if _, err := postgresBinaries(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, picked, err := pickPorts("PostgresConfig.Port", nonZero(c.Port), 1)
		if err != nil {
			return nil, err
		}
		p := newServer(dir, ports[0], c)
		err = p.startOrAdopt(ctx)
		if err == nil {
			return p, nil
		}
		if !picked || attempt == 3 || !isPortConflict(err) {
			return nil, err
		}
	}
}

func newPostgres(dir string, port int, c PostgresConfig) *Postgres {
	p := &Postgres{Proc: &Proc{
		kind:       KindPostgres,
		name:       nameFor(KindPostgres, dir),
		dir:        dir,
		addr:       hostPort(port),
		ports:      []int{port},
		detach:     c.Detach,
		timeout:    c.StartTimeout,
		stopSignal: syscall.SIGINT, // fast shutdown: ends sessions, then stops
	}}
	data := filepath.Join(dir, "data")
	p.command = func(ctx context.Context) (*exec.Cmd, error) {
		return postgresCommand(ctx, dir, data, port, c, initdbData)
	}
	p.afterReady = func(ctx context.Context) error { return createAegisDatabase(ctx, p.Addr()) }
	p.wipe = func() error { return os.RemoveAll(data) }
	return p
}

// initFunc creates a cluster in data, as the user cred (nil: ourselves),
// with the environment env.
type initFunc func(ctx context.Context, data string, cred *syscall.Credential, env []string) error

// postgresCommand prepares dir (creating the cluster with initData when
// data holds none, writing the test settings) and returns the command
// that runs the server.
func postgresCommand(ctx context.Context, dir, data string, port int, c PostgresConfig, initData initFunc) (*exec.Cmd, error) {
	bins, err := postgresBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	if cred != nil {
		// PostgreSQL refuses to run as root: it runs as postgres, which
		// must own its directory and reach it.
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		if err := ensureSearchable(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	env := postgresEnv()
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		if err := os.RemoveAll(data); err != nil { // a half-done initdb
			return nil, err
		}
		if err := initData(ctx, data, cred, env); err != nil {
			return nil, err
		}
		if err := includeAegisConf(data); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(data, "aegis.conf"), []byte(postgresSettings(dir, port, c)), 0o644); err != nil {
		return nil, err
	}
	for _, lock := range []string{filepath.Join(data, "postmaster.pid"), filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port)+".lock")} {
		if err := removeStaleLock(lock); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(bins.postgres, "-D", data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Env = env
	return cmd, nil
}

// initdbData creates an empty cluster with the superuser postgres and
// trust authentication (which also admits replication connections from
// 127.0.0.1: initdb's pg_hba.conf has host replication lines).
func initdbData(ctx context.Context, data string, cred *syscall.Credential, env []string) error {
	bins, err := postgresBinaries()
	if err != nil {
		return err
	}
	initdb := exec.CommandContext(ctx, bins.initdb, "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Env = env
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, lastLines(string(out), 15))
	}
	return nil
}

const aegisInclude = "include_if_exists = 'aegis.conf'"

// includeAegisConf makes postgresql.conf read aegis.conf, the test
// settings that every start rewrites. A base backup of our server already
// has the line.
func includeAegisConf(data string) error {
	path := filepath.Join(data, "postgresql.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), "\n"+aegisInclude+"\n") {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# Written by aegis: the test settings.\n%s\n", aegisInclude)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func postgresSettings(dir string, port int, c PostgresConfig) string {
	socketDir := dir
	if len(filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port)+".lock")) > 100 {
		socketDir = "" // too long for a Unix socket path: TCP only
	}
	durable := "off" // test speed over durability
	if c.Durable {
		durable = "on"
	}
	settings := [][2]string{
		{"listen_addresses", "127.0.0.1"},
		{"port", strconv.Itoa(port)},
		{"unix_socket_directories", socketDir},
		{"max_connections", strconv.Itoa(c.MaxConnections)},
		{"fsync", durable},
		{"synchronous_commit", durable},
		{"full_page_writes", durable},
		// Parallel workers need /dev/shm, which is small in containers.
		{"max_parallel_workers_per_gather", "0"},
		{"log_min_messages", "warning"},
	}
	for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
		settings = append(settings, [2]string{k, c.Settings[k]})
	}
	var b strings.Builder
	b.WriteString("# Written by aegis on every start; edits are lost.\n")
	for _, kv := range settings {
		fmt.Fprintf(&b, "%s = '%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", "''"))
	}
	return b.String()
}

// removeStaleLock removes a PostgreSQL lock file whose process is gone or
// a zombie. PostgreSQL removes such a file itself, except when the pid is
// a zombie (the orphan of a killed detached server, where init does not
// reap): then it takes the server for alive and refuses to start.
func removeStaleLock(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil // no lock
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return nil // not ours to judge: PostgreSQL will say what is wrong
	}
	if state, _, err := processStat(pid); err == nil && state != 'Z' {
		return nil // alive: PostgreSQL refuses to start, and says why
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// postgresEnv is our environment with the C locale: minimal machines have
// no other locale generated, and initdb fails on a missing one.
func postgresEnv() []string {
	env := []string{"LC_ALL=C"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") || strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

var postgresUser struct {
	sync.Mutex
	cred *syscall.Credential
}

// postgresCredential returns the credential PostgreSQL runs under: nil
// (ourselves) unless we are root, then the system user postgres, created
// when missing.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	postgresUser.Lock()
	defer postgresUser.Unlock()
	if postgresUser.cred != nil {
		return postgresUser.cred, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		out, aerr := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/var/lib/postgresql", "--shell", "/usr/sbin/nologin", "postgres").CombinedOutput()
		if aerr != nil {
			return nil, fmt.Errorf("create the system user postgres (PostgreSQL does not run as root): %w: %s", aerr, strings.TrimSpace(string(out)))
		}
		if u, err = user.Lookup("postgres"); err != nil {
			return nil, err
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres has uid %q, gid %q", u.Uid, u.Gid)
	}
	postgresUser.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return postgresUser.cred, nil
}

// ensureSearchable gives others search permission (o+x, not read) on dir
// and every directory above it that lacks it, so that the postgres user
// reaches its data directory under, say, a 0700 temporary directory.
func ensureSearchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return err
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// createAegisDatabase creates the role and the database aegis when missing.
func createAegisDatabase(ctx context.Context, addr string) error {
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from pg_roles where rolname = 'aegis'").Scan(&n); err != nil {
		return fmt.Errorf("create role aegis: %w", err)
	}
	if n == 0 {
		if _, err := conn.Exec(ctx, "create role aegis login superuser"); err != nil {
			return fmt.Errorf("create role aegis: %w", err)
		}
	}
	if err := conn.QueryRow(ctx, "select count(*) from pg_database where datname = 'aegis'").Scan(&n); err != nil {
		return fmt.Errorf("create database aegis: %w", err)
	}
	if n == 0 {
		if _, err := conn.Exec(ctx, "create database aegis owner aegis"); err != nil {
			return fmt.Errorf("create database aegis: %w", err)
		}
	}
	return nil
}

func nonZero(port int) []int {
	if port == 0 {
		return nil
	}
	return []int{port}
}

// nameFor names a single server after its directory when the directory is
// named for its kind ("redis-3"), else after its kind.
func nameFor(kind Kind, dir string) string {
	if base := filepath.Base(dir); strings.HasPrefix(base, string(kind)) {
		return base
	}
	return string(kind)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
