package sqlitelease_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/rowleasetest"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv("SQLITELEASE_CHILD_DB"); path != "" {
		if key := os.Getenv("SQLITELEASE_CHILD_GREEDY"); key != "" {
			os.Exit(greedyChild(path, key))
		}
		os.Exit(child(path))
	}
	goleak.VerifyTestMain(m)
}

func open(t *testing.T, path string) *sql.DB {
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestLocktest(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	locktest.Run(t, locktest.Config{
		// A database handle per instance, as separate processes would have.
		// BusyTimeout 1m: with a second suite beside this one, a writer
		// waited over the default 5s for the write lock (SQLITE_BUSY in
		// ConcurrentCounter); the cases judge exclusion, not how fast.
		New: func(t *testing.T) aegis.Locker {
			l, err := sqlitelease.New(open(t, path), &sqlitelease.Config{BusyTimeout: time.Minute})
			require.NoError(t, err)
			return l
		},
		// 2s: every subtest shares one database file, and SQLite's busy
		// handler can keep a writer waiting for a second on a loaded machine.
		TTL: 2 * time.Second,
	})
}

// TestProcesses runs real processes that increment a counter file under a
// lease: any overlap of two critical sections loses an increment.
func TestProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lease.db")
	counter := filepath.Join(dir, "counter")
	require.NoError(t, os.WriteFile(counter, []byte("0"), 0o644))
	const procs, each = 4, 25
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SQLITELEASE_CHILD_DB="+path, "SQLITELEASE_CHILD_COUNTER="+counter, "SQLITELEASE_CHILD_N="+strconv.Itoa(each))
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	got, err := os.ReadFile(counter)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(procs*each), string(got), "lost updates: critical sections in separate processes overlapped")
}

// child is one process of TestProcesses.
func child(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	counter := os.Getenv("SQLITELEASE_CHILD_COUNTER")
	n, _ := strconv.Atoi(os.Getenv("SQLITELEASE_CHILD_N"))
	db, err := sqlitelease.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	l, err := sqlitelease.New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var last aegis.Token
	for range n {
		lease, err := aegis.Acquire(ctx, l, "counter", 10*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if lease.Token <= last {
			fmt.Fprintf(os.Stderr, "token %d after %d\n", lease.Token, last)
			return 1
		}
		last = lease.Token
		b, err := os.ReadFile(counter)
		if err == nil {
			v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			time.Sleep(time.Millisecond)
			err = os.WriteFile(counter, []byte(strconv.Itoa(v+1)), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := l.Release(ctx, lease); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := open(t, filepath.Join(t.TempDir(), "x.db"))
	for name, cfg := range map[string]*sqlitelease.Config{
		"bad name":      {Table: "bad name"},
		"too long":      {Table: strings.Repeat("x", 57)},
		"negative busy": {BusyTimeout: -time.Second},
	} {
		_, err := sqlitelease.New(db, cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, name)
		require.ErrorContains(t, err, "Config.", name)
		require.ErrorIs(t, sqlitelease.Migrate(t.Context(), db, cfg), aegis.ErrInvalid, name)
	}
	_, err := sqlitelease.New(db, &sqlitelease.Config{Table: "bad name"})
	require.ErrorContains(t, err, "Config.Table")
	_, err = sqlitelease.New(db, &sqlitelease.Config{BusyTimeout: -time.Second})
	require.ErrorContains(t, err, "Config.BusyTimeout")
	_, err = sqlitelease.New(db, &sqlitelease.Config{Table: strings.Repeat("x", 56)})
	require.NoError(t, err, "56 characters fit")
	_, err = sqlitelease.New(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "db is nil")
	require.ErrorIs(t, sqlitelease.Migrate(t.Context(), nil, nil), aegis.ErrInvalid)
	_, err = sqlitelease.Open("")
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "path is empty")
}

// TestWaiterUnderGreedyProcess: a process that loops Hold → 5ms of work →
// Release on a key must not keep another process's waiter out. Before the
// queue, the waiter got the key only when its poll fell into the holder's
// gap between Release and its next grant: seconds, hundreds of the greedy
// process's grants. Counted in grants (the tokens between the waiter's ask
// and its grant), not in time: a loaded machine slows both alike.
func TestWaiterUnderGreedyProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	l, err := sqlitelease.New(open(t, path), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SQLITELEASE_CHILD_DB="+path, "SQLITELEASE_CHILD_GREEDY=greedy")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	granted := make(chan aegis.Token, 1)
	go func() {
		// Each line is a token the greedy process was granted.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			tok, err := strconv.ParseInt(sc.Text(), 10, 64)
			if err != nil {
				continue
			}
			select {
			case granted <- aegis.Token(tok):
			default:
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		stdin.Close() // the child stops at the end of its stdin
		select {
		case err := <-exited:
			require.NoError(t, err, "the greedy process failed")
		case <-time.After(20 * time.Second):
			t.Error("the greedy process did not stop within 20s of its stdin closing")
		}
	}()

	// The grants the greedy process may get while the waiter waits: the
	// one in progress and the one it may have queued for before the
	// waiter, with room for the lines the reader has not read yet.
	const bound = 10
	var last aegis.Token
	for round := range 5 {
		// Ask while the other process is in its loop: after one of its
		// grants that came after the waiter's last.
		var before aegis.Token
	next:
		for {
			select {
			case tok := <-granted:
				if tok > last {
					before = tok
					break next
				}
			case err := <-exited:
				t.Fatalf("round %d: the greedy process ended: %v", round, err)
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: the greedy process got no grant within 20s", round)
			}
		}
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		lease, err := aegis.Acquire(actx, l, "greedy", 10*time.Second)
		acancel()
		require.NoError(t, err, "round %d", round)
		require.Greater(t, lease.Token, before)
		require.LessOrEqual(t, int64(lease.Token-before-1), int64(bound), "round %d: the greedy process was granted the key %d times while the waiter waited", round, lease.Token-before-1)
		last = lease.Token
		require.NoError(t, l.Release(ctx, lease))
	}
}

// greedyChild is the greedy process of TestWaiterUnderGreedyProcess: it
// loops Hold → 5ms → Release on key and prints each grant's token, until
// its stdin ends.
func greedyChild(path, key string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	db, err := sqlitelease.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	l, err := sqlitelease.New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		h, err := aegis.Hold(ctx, l, key, 10*time.Second)
		if ctx.Err() != nil {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(h.Token())
		select {
		case <-time.After(5 * time.Millisecond): // the holder's work
		case <-ctx.Done():
		}
		if err := h.Release(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
}

// TestGrantedWaiterFreesTheQueue: once the only waiter is granted and
// releases, TryAcquire takes the key at once (the queue hint is lowered).
func TestGrantedWaiterFreesTheQueue(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	db := open(t, path)
	a, err := sqlitelease.New(db, nil)
	require.NoError(t, err)
	b, err := sqlitelease.New(open(t, path), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	held, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	got := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (n int, err error) {
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM aegis_lease_waiter WHERE key = 'k'").Scan(&n)
		return n, err
	})
	_, err = a.TryAcquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, a.Release(ctx, held))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the key within 10s of its release")
	}
	again, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err, "TryAcquire refused for a queue that is gone")
	require.NoError(t, a.Release(ctx, again))
}

// TestCrashedWaiterBlocksBriefly: a queue entry nobody refreshes (its
// waiter's process died) holds up the key for at most its expiry.
func TestCrashedWaiterBlocksBriefly(t *testing.T) {
	t.Parallel()
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	a, err := sqlitelease.New(db, nil)
	require.NoError(t, err)
	const now = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`
	rowleasetest.CrashedWaiterBlocksBriefly(t, a, "k", func(ctx context.Context) error {
		if _, err := db.ExecContext(ctx, `INSERT INTO aegis_lease_waiter (key, waiter, since_ms, expires_ms) VALUES ('k', 'dead', `+now+`, `+now+` + 1000)`); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, `UPDATE aegis_lease SET queue_ms = `+now+` + 1000 WHERE key = 'k'`)
		return err
	})
}

// TestUpgradeFromVersion1: a lease table created before the queue and the
// holder names is upgraded by New, and its tokens go on from where they
// were.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, stmt := range []string{
		`CREATE TABLE aegis_migrations (component text NOT NULL, version integer NOT NULL, PRIMARY KEY (component, version))`,
		`INSERT INTO aegis_migrations VALUES ('sqlitelease:aegis_lease', 1)`,
		`CREATE TABLE aegis_lease (key TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL, expires_ms INTEGER NOT NULL, granted_ms INTEGER NOT NULL) WITHOUT ROWID`,
		`INSERT INTO aegis_lease VALUES ('k', 'old', 41, 0, 0)`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	l, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "upgraded"})
	require.NoError(t, err)
	require.Empty(t, holderOf(t, db, "k"), "a grant made before holder names has none")
	lease, err := aegis.Acquire(ctx, l, "k", time.Minute)
	require.NoError(t, err)
	require.Equal(t, aegis.Token(42), lease.Token)
	require.Equal(t, "upgraded", holderOf(t, db, "k"))
	var version int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT max(version) FROM aegis_migrations WHERE component = 'sqlitelease:aegis_lease'`).Scan(&version))
	require.Equal(t, 4, version)
}

// TestOpenOddPath: a path with the characters a URI gives a meaning to
// ('?', '#', '%', a space) opens that very file, with this package's
// settings (WAL).
func TestOpenOddPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := "a?b#c%41 d.db"
	db := open(t, filepath.Join(dir, name))
	var mode string
	require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
	_, err := sqlitelease.New(db, nil)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, name))
	require.NoError(t, err, "the database is not at the path given")
}
