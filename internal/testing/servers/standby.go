package servers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotStandby is the error of [Postgres.Promote] and
// [Postgres.WaitReplayed] on a server that is not in recovery (a primary,
// or a standby promoted since), and of [StartStandby] when its directory
// holds a cluster that is not a standby.
var ErrNotStandby = errors.New("servers: not a standby")

// standbyWait bounds Promote's and WaitReplayed's waits when ctx has no
// earlier deadline.
const standbyWait = 30 * time.Second

// StartStandby starts a PostgreSQL hot standby of primary, for tests of
// code that must tell the writer primary from a read-only replica, and of
// what it does when the replica is promoted.
//
// When dir/data holds no cluster, it takes a base backup of primary with
// pg_basebackup (as the superuser postgres over 127.0.0.1, streaming the
// WAL it needs, with a standby.signal and primary_conninfo written by
// --write-recovery-conf); primary must be a server of [StartPostgres],
// whose trust authentication and default wal_level (replica) and
// max_wal_senders (10) admit it. Then it starts the standby like
// StartPostgres (its own free port unless cfg.Port is set, the same test
// settings, as the user postgres when we are root) with hot_standby on,
// and returns once it accepts connections to the database aegis as the
// role aegis, and is in recovery. No replication slot is made: a standby
// stopped for long may need WAL the primary has recycled.
//
// The standby streams the primary's WAL and serves reads only: a write
// fails with SQLSTATE 25006 (read_only_sql_transaction), and so do LISTEN
// and NOTIFY, so code that binds to a standby's notifications must poll.
//
// cfg may be nil; MaxConnections defaults to the primary's max_connections
// and may not be lower (a hot standby needs at least as many). Restart
// keeps the standby's data; Wipe then Start takes a new base backup.
func StartStandby(ctx context.Context, dir string, primary *Postgres, cfg *PostgresConfig) (*Postgres, error) {
	if primary == nil || primary.Proc == nil {
		return nil, errors.New("servers: StartStandby: primary is nil")
	}
	if _, err := basebackupBinary(); err != nil {
		return nil, err
	}
	c := PostgresConfig{}
	if cfg != nil {
		c = *cfg
	}
	settings := map[string]string{"hot_standby": "on"}
	maps.Copy(settings, c.Settings) // the caller's win, as in StartPostgres
	c.Settings = settings
	primaryMax, err := maxConnections(ctx, primary)
	if err != nil {
		return nil, err
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = primaryMax
	}
	if c.MaxConnections < primaryMax {
		return nil, fmt.Errorf("servers: PostgresConfig.MaxConnections is %d, want at least the primary's %d (a hot standby refuses fewer)", c.MaxConnections, primaryMax)
	}
	p, err := startPostgres(ctx, dir, c, func(dir string, port int, c PostgresConfig) *Postgres {
		return newStandby(dir, port, c, primary.Addr())
	})
	if err != nil {
		return nil, err
	}
	inRecovery, err := p.inRecovery(ctx)
	if err == nil && !inRecovery {
		err = fmt.Errorf("servers: %s on %s: %s holds a cluster out of recovery: %w", p.Name(), p.Addr(), filepath.Join(p.Dir(), "data"), ErrNotStandby)
	}
	if err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

func newStandby(dir string, port int, c PostgresConfig, primaryAddr string) *Postgres {
	p := newPostgres(dir, port, c)
	if p.name == string(KindPostgres) {
		p.name = "postgres-standby"
	}
	data := filepath.Join(dir, "data")
	backup := baseBackup(primaryAddr, c.StartTimeout)
	p.command = func(ctx context.Context) (*exec.Cmd, error) {
		return postgresCommand(ctx, dir, data, port, c, backup)
	}
	// The role and database aegis come with the base backup, and a
	// standby could not create them: check that they serve.
	p.afterReady = func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.URL())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return conn.Ping(ctx)
	}
	return p
}

// baseBackup returns the initFunc of a standby: a base backup of the
// server at primaryAddr, into a scratch directory renamed to data once
// complete, so that a backup cut short never passes for a cluster.
func baseBackup(primaryAddr string, timeout time.Duration) initFunc {
	return func(ctx context.Context, data string, cred *syscall.Credential, env []string) error {
		bin, err := basebackupBinary()
		if err != nil {
			return err
		}
		_, port, err := net.SplitHostPort(primaryAddr)
		if err != nil {
			return err
		}
		tmp := data + ".basebackup"
		if err := os.RemoveAll(tmp); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--pgdata="+tmp, "--host=127.0.0.1", "--port="+port,
			"--username=postgres", "--no-password", "--write-recovery-conf", "--wal-method=stream",
			"--checkpoint=fast", "--no-sync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("pg_basebackup from %s: %w\n%s", primaryAddr, err, lastLines(string(out), 15))
		}
		return os.Rename(tmp, data)
	}
}

// basebackupBinary finds the pg_basebackup beside postgres.
func basebackupBinary() (string, error) {
	bins, err := postgresBinaries()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(filepath.Dir(bins.postgres), "pg_basebackup")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	return lookProgram(KindPostgres, "pg_basebackup", "postgresql-client", filepath.Dir(bins.postgres))
}

// Promote promotes a standby to a primary that accepts writes, as a
// failover does. It returns once the server is out of recovery and a
// write (a temporary table) succeeds, within 30 s or ctx's deadline; a
// promotion under way when ctx ends may still complete. On a server that
// is not in recovery it returns an error wrapping [ErrNotStandby] and
// changes nothing.
func (p *Postgres) Promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, standbyWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		return fmt.Errorf("servers: promote %s on %s: %w", p.Name(), p.Addr(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var inRecovery bool
	if err := conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("servers: promote %s on %s: %w", p.Name(), p.Addr(), err)
	}
	if !inRecovery {
		return fmt.Errorf("servers: promote %s on %s: %w (it is out of recovery)", p.Name(), p.Addr(), ErrNotStandby)
	}
	d, _ := ctx.Deadline()
	wait := max(1, int(time.Until(d)/time.Second))
	var promoted bool
	// pg_promote(wait => true) returns once recovery has ended, or false
	// after wait seconds.
	if err := conn.QueryRow(ctx, "select pg_promote(true, $1)", wait).Scan(&promoted); err != nil {
		return fmt.Errorf("servers: promote %s on %s: %w", p.Name(), p.Addr(), err)
	}
	if promoted {
		err = conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery)
	}
	if err != nil {
		return fmt.Errorf("servers: promote %s on %s: %w", p.Name(), p.Addr(), err)
	}
	if !promoted || inRecovery {
		return fmt.Errorf("servers: promote %s on %s: still in recovery after %d s", p.Name(), p.Addr(), wait)
	}
	// A write proves it: transactions started after recovery are
	// read-write. The table goes with the transaction.
	if _, err := conn.Exec(ctx, "create temporary table aegis_promoted (v int) on commit drop"); err != nil {
		return fmt.Errorf("servers: promote %s on %s: promoted, but a write fails: %w", p.Name(), p.Addr(), err)
	}
	return nil
}

// WaitReplayed waits until the standby p has replayed every transaction
// that primary committed before the call, so that a test reads on p what
// it wrote on primary. It takes primary's WAL insert position, then
// commits a logical message there with synchronous_commit on (the test
// settings turn it off, which could leave the last commits in primary's
// WAL buffers, unsent, for up to wal_writer_delay), and polls p's
// pg_last_wal_replay_lsn() until it reaches that position, within 30 s or
// ctx's deadline. It returns an error wrapping [ErrNotStandby] when p is
// out of recovery before it has replayed that far (a promoted standby
// replays nothing more).
func (p *Postgres) WaitReplayed(ctx context.Context, primary *Postgres) error {
	if primary == nil || primary.Proc == nil {
		return fmt.Errorf("servers: wait for %s on %s to replay: primary is nil", p.Name(), p.Addr())
	}
	ctx, cancel := context.WithTimeout(ctx, standbyWait)
	defer cancel()
	fail := func(err error) error {
		return fmt.Errorf("servers: wait for %s on %s to replay %s: %w", p.Name(), p.Addr(), primary.Addr(), err)
	}
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		return fail(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var standby bool
	if err := conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&standby); err != nil {
		return fail(err)
	}
	if !standby {
		return fail(ErrNotStandby) // before writing on primary, which may be a standby
	}
	target, err := flushedInsertLSN(ctx, primary)
	if err != nil {
		return fail(err)
	}
	delay := 5 * time.Millisecond
	for {
		var replayed string
		var done bool
		err := conn.QueryRow(ctx, "select pg_last_wal_replay_lsn()::text, pg_last_wal_replay_lsn() >= $1::pg_lsn, pg_is_in_recovery()",
			target).Scan(&replayed, &done, &standby)
		if err != nil {
			return fail(err)
		}
		if done {
			return nil
		}
		if !standby {
			return fail(fmt.Errorf("replayed up to %s, not %s: %w", replayed, target, ErrNotStandby))
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("replayed up to %s, not %s: %w", replayed, target, ctx.Err()))
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// flushedInsertLSN returns the WAL insert position of primary, which
// covers every commit before it, after flushing the WAL up to it.
func flushedInsertLSN(ctx context.Context, primary *Postgres) (string, error) {
	conn, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := conn.QueryRow(ctx, "select pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return "", err
	}
	// A transactional message gets a transaction id and a WAL record, so
	// its commit flushes (a commit that wrote no WAL would not). Its
	// records also carry the standby past lsn when the last record before
	// lsn ends on a page boundary: lsn is then past the next page's
	// header, which no replayed record's end equals.
	_, err = conn.Exec(ctx, "begin; set local synchronous_commit = on; select pg_logical_emit_message(true, 'aegis', 'servers: WaitReplayed'); commit")
	return lsn, err
}

// inRecovery reports pg_is_in_recovery() of p.
func (p *Postgres) inRecovery(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var in bool
	err = conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&in)
	return in, err
}

// maxConnections returns the max_connections of a running server.
func maxConnections(ctx context.Context, p *Postgres) (int, error) {
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		return 0, fmt.Errorf("servers: StartStandby: primary %s on %s: %w", p.Name(), p.Addr(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s string
	if err := conn.QueryRow(ctx, "show max_connections").Scan(&s); err != nil {
		return 0, fmt.Errorf("servers: StartStandby: primary %s on %s: %w", p.Name(), p.Addr(), err)
	}
	return strconv.Atoi(s)
}

// Switchover fails primary over to its standby p without losing a commit,
// as a planned switchover does, and returns primary's last WAL position.
// It stops primary (a fast shutdown: its sessions end, what they had not
// committed rolls back, and its WAL up to the shutdown checkpoint goes to
// the standbys streaming from it before it exits), reads that checkpoint's
// position with pg_controldata, waits until p has replayed past it, then
// promotes p ([Postgres.Promote]). primary stays stopped: no client can
// write to it, and its data, which p's new timeline leaves behind, is
// fit only to be wiped. The waits are bounded by 30 s or ctx's deadline.
// It returns an error wrapping [ErrNotStandby] when p is not in recovery
// (and then stops nothing), and an error that names the step that failed
// otherwise; primary may then be stopped already.
func (p *Postgres) Switchover(ctx context.Context, primary *Postgres) (string, error) {
	if primary == nil || primary.Proc == nil {
		return "", fmt.Errorf("servers: switch over to %s on %s: primary is nil", p.Name(), p.Addr())
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("servers: switch over from %s to %s on %s: %w", primary.Addr(), p.Name(), p.Addr(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, standbyWait)
	defer cancel()
	if in, err := p.inRecovery(ctx); err != nil || !in {
		return fail(cmp.Or(err, ErrNotStandby))
	}
	if err := primary.Stop(); err != nil {
		return fail(err)
	}
	last, err := checkpointLSN(ctx, filepath.Join(primary.Dir(), "data"))
	if err != nil {
		return fail(err)
	}
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		return fail(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	delay := 5 * time.Millisecond
	for {
		// The replay position is the end of the last record replayed:
		// past the shutdown checkpoint's start once it is replayed.
		var replayed string
		var done bool
		if err := conn.QueryRow(ctx, "select pg_last_wal_replay_lsn()::text, pg_last_wal_replay_lsn() > $1::pg_lsn", last).Scan(&replayed, &done); err != nil {
			return fail(err)
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("the standby replayed up to %s, not past the primary's last record at %s: %w", replayed, last, ctx.Err()))
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
	if err := p.Promote(ctx); err != nil {
		return "", err
	}
	return last, nil
}

// checkpointLSN returns the latest checkpoint's position in the control
// file of the stopped cluster in data: after a clean shutdown, the
// shutdown checkpoint, its last WAL record.
func checkpointLSN(ctx context.Context, data string) (string, error) {
	bins, err := postgresBinaries()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(bins.postgres), "pg_controldata"), data)
	cmd.Env = postgresEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pg_controldata %s: %w\n%s", data, err, lastLines(string(out), 5))
	}
	state := ""
	for line := range strings.Lines(string(out)) {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "Database cluster state":
			state = strings.TrimSpace(v)
		case "Latest checkpoint location":
			if state != "shut down" {
				return "", fmt.Errorf("the primary's cluster is %q, not shut down: its last commits may not have reached the standby", state)
			}
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("pg_controldata %s: no latest checkpoint location in its output", data)
}
