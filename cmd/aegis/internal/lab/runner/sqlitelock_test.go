package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/lease/sqlitelease"
)

// TestSQLiteWriteLockFree: the probe a pause uses on a SQLite store finds
// the write lock taken while another connection's write transaction
// holds it, and free once that transaction ended.
func TestSQLiteWriteLockFree(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ctx := t.Context()

	free, err := sqliteWriteLockFree(ctx, path, 100*time.Millisecond)
	require.NoError(t, err)
	require.True(t, free, "nobody writes")

	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	require.NoError(t, err)
	free, err = sqliteWriteLockFree(ctx, path, 100*time.Millisecond)
	require.NoError(t, err)
	require.False(t, free, "a write transaction holds the lock")

	require.NoError(t, tx.Rollback())
	free, err = sqliteWriteLockFree(ctx, path, 100*time.Millisecond)
	require.NoError(t, err)
	require.True(t, free, "the transaction ended")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = sqliteWriteLockFree(cancelled, path, 100*time.Millisecond)
	require.Error(t, err, "a probe with its context ended")
}

// TestStopOutsideSQLiteWrite: a process that spends a third of its time
// inside SQLite write transactions (5 ms in, 10 ms out), stopped as a
// pause stops a node, is left stopped outside them: the store's write
// lock is free while it is stopped, every time.
func TestStopOutsideSQLiteWrite(t *testing.T) {
	if path := os.Getenv("AEGIS_TEST_SQLITE_WRITER"); path != "" {
		sqliteWriter(path) // the child: never returns
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	cmd := exec.Command(os.Args[0], "-test.run=^TestStopOutsideSQLiteWrite$")
	cmd.Env = append(os.Environ(), "AEGIS_TEST_SQLITE_WRITER="+path)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Error("the writer did not exit within 10s of SIGKILL")
		}
	})
	// The child writes once before it is counted as started.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if db.QueryRow(`SELECT count(*) FROM writer`).Scan(&n) == nil && n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the writer did not write within 30s")
		time.Sleep(10 * time.Millisecond)
	}

	r := &Run{store: "sqlite:" + path}
	np := &nodeProc{n: 1, cmd: cmd, exited: exited}
	ctx := t.Context()
	for try := range 10 {
		_, err := r.stopSignal(ctx, np)
		require.NoError(t, err)
		inside, err := r.stopOutsideSQLiteWrite(ctx, np)
		require.NoError(t, err)
		require.False(t, inside, "try %d: it reports the writer stopped inside a transaction", try)
		free, err := sqliteWriteLockFree(ctx, path, 500*time.Millisecond)
		require.NoError(t, err)
		require.True(t, free, "try %d: the stopped writer holds the store's write lock", try)
		_, err = r.signal(np, syscall.SIGCONT)
		require.NoError(t, err)
		time.Sleep(7 * time.Millisecond) // lands anywhere in its next cycle
	}
}

// sqliteWriter writes to the SQLite database at path in a loop: 5 ms
// inside a write transaction, 10 ms outside.
func sqliteWriter(path string) {
	db, err := sqlitelease.Open(path)
	if err != nil {
		os.Exit(2)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS writer (n integer)`); err != nil {
		os.Exit(2)
	}
	for {
		tx, err := db.Begin()
		if err == nil {
			_, _ = tx.Exec(`INSERT INTO writer VALUES (1)`)
			time.Sleep(5 * time.Millisecond)
			_ = tx.Commit()
		}
		time.Sleep(10 * time.Millisecond)
	}
}
