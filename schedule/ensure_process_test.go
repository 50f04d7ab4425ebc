package schedule_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

const (
	ensureEnvChild = "AEGIS_ENSURE_PROC" // "1" in a process of TestEnsureProcesses
	ensureNS       = "ensure-proc"
)

// ensureEntry is what every process ensures.
var ensureEntry = schedule.Entry{Name: "nightly", Cron: "0 0 2 * * *", TZ: "Europe/Berlin", Handler: "invoice"}

// TestEnsureProcMain is a process of TestEnsureProcesses when
// ensureEnvChild is set, and does nothing otherwise: it opens the catalog,
// says ready, waits for a line on stdin (the barrier), calls Ensure and
// exits with 0, or 1 with the error on stderr.
func TestEnsureProcMain(t *testing.T) {
	if os.Getenv(ensureEnvChild) != "1" {
		return
	}
	if err := ensureProc(); err != nil {
		fmt.Fprintln(os.Stderr, "ensure:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func ensureProc() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, _, err := procOpen(os.Getenv(procEnvStore))
	if err != nil {
		return err
	}
	defer db.Close()
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: ensureNS})
	if err != nil {
		return err
	}
	if err := db.PingContext(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	_, err = cat.Ensure(ctx, ensureEntry)
	return err
}

// Three processes, each with its own connections, call Ensure past a
// barrier (a line written to each one's stdin at once) on PostgreSQL and
// SQLite: the store then has the schedule at version 1, and the
// namespace's change counter at 1: one edit, the create.
func TestEnsureProcesses(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			store := "sqlite:" + filepath.Join(t.TempDir(), "ensure.db")
			if kind == "postgres" {
				store = testenv.PostgresURL(t)
			}
			ctx := context.Background()
			db, _, err := procOpen(store)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: ensureNS}) // the tables, before the race
			require.NoError(t, err)

			type proc struct {
				cmd    *exec.Cmd
				stdin  io.WriteCloser
				stderr *testenv.Buffer
				exited chan error
			}
			ready := make(chan int, 3)
			procs := make([]*proc, 3)
			for i := range procs {
				cmd := exec.Command(os.Args[0], "-test.run=^TestEnsureProcMain$", "-test.count=1")
				cmd.Env = append(os.Environ(), ensureEnvChild+"=1", procEnvStore+"="+store)
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				p := &proc{cmd: cmd, stderr: &testenv.Buffer{}, exited: make(chan error, 1)}
				cmd.Stderr = p.stderr
				p.stdin, err = cmd.StdinPipe()
				require.NoError(t, err)
				stdout, err := cmd.StdoutPipe()
				require.NoError(t, err)
				require.NoError(t, cmd.Start())
				t.Cleanup(func() { _ = cmd.Process.Kill() })
				go func() {
					sc := bufio.NewScanner(stdout)
					for sc.Scan() {
						if sc.Text() == "ready" {
							ready <- i
						}
					}
					p.exited <- cmd.Wait()
				}()
				procs[i] = p
			}
			deadline := time.After(2 * time.Minute)
			for range procs {
				select {
				case <-ready:
				case <-deadline:
					t.Fatalf("the processes did not all open the catalog within 2 minutes: %s %s %s",
						procs[0].stderr, procs[1].stderr, procs[2].stderr)
				}
			}
			for _, p := range procs { // the barrier
				_, err := io.WriteString(p.stdin, "go\n")
				require.NoError(t, err)
			}
			for i, p := range procs {
				select {
				case err := <-p.exited:
					require.NoError(t, err, "process %d: %s", i, p.stderr)
				case <-deadline:
					t.Fatalf("process %d did not exit within 2 minutes: %s", i, p.stderr)
				}
			}

			e, err := cat.Get(ctx, ensureEntry.Name)
			require.NoError(t, err)
			require.Equal(t, int64(1), e.Version)
			var gen int64
			require.NoError(t, db.QueryRowContext(ctx, `SELECT generation FROM aegis_schedule_namespace WHERE namespace = $1`, ensureNS).Scan(&gen))
			require.Equal(t, int64(1), gen, "one edit of the namespace: the create")
		})
	}
}
