package sqlitelease_test

import (
	"context"
	"database/sql"
	"fmt"
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
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/locktest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv("SQLITELEASE_CHILD_DB"); path != "" {
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
		New: func(t *testing.T) aegis.Locker {
			l, err := sqlitelease.New(open(t, path), nil)
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
	_, err := sqlitelease.New(db, &sqlitelease.Config{Table: "bad name"})
	require.ErrorContains(t, err, "Config.Table")
	_, err = sqlitelease.New(db, &sqlitelease.Config{BusyTimeout: -time.Second})
	require.ErrorContains(t, err, "Config.BusyTimeout")
	_, err = sqlitelease.New(nil, nil)
	require.ErrorContains(t, err, "db is nil")
	_, err = sqlitelease.Open("")
	require.ErrorContains(t, err, "path is empty")
}
