package queue

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// crashChildEnv holds the database URL when the test binary runs as the
// crash test's child worker.
const crashChildEnv = "AEGIS_QUEUE_CRASH_CHILD_URL"

// crashChild is the child worker: it claims a job, says so on stdout, and
// hangs in the handler until it is killed.
func crashChild() int {
	ctx := context.Background()
	p, err := pgxpool.New(ctx, os.Getenv(crashChildEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ws := workers(func(ctx context.Context, job *Job[testArgs]) error {
		fmt.Printf("claimed %d %d\n", job.ID, job.Token)
		select {} // mid-job, until SIGKILL
	})
	c, err := New(p, &Config{
		ID:      "crash-child",
		Queues:  map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: ws,
		Lease:   time.Second,
	})
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	select {}
}

// startCrashChild starts the child worker and waits until it says it
// claimed job id, with token 1. The child is killed when the test ends.
func startCrashChild(t *testing.T, id int64) *exec.Cmd {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+testenv.PostgresURL(t))
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	child.Stderr = testWriter{t}
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		require.Equal(t, fmt.Sprintf("claimed %d 1", id), line)
	case <-time.After(20 * time.Second):
		t.Fatal("the child worker did not claim the job within 20s")
	}
	return child
}

// TestCrashedWorkerProcess kills a real worker process mid-job with
// SIGKILL: the job's lease expires, the reaper reclaims it with a greater
// token, another worker runs it and completes it, exactly once.
func TestCrashedWorkerProcess(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	_, err := p.Exec(ctx, `CREATE TABLE effect (job_id bigint PRIMARY KEY, token bigint NOT NULL)`)
	require.NoError(t, err)

	enq := client(t, p, nil)
	res, err := enq.Enqueue(ctx, testArgs{N: 1}, nil)
	require.NoError(t, err)
	id := res.Job.ID

	// The child worker claims the job and hangs in its handler.
	child := startCrashChild(t, id)

	// Crash: SIGKILL, mid-job. The job is still running under the child's lease.
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	err = child.Wait()
	require.Error(t, err)
	require.Contains(t, err.Error(), "killed")
	j, err := enq.Job(ctx, id)
	require.NoError(t, err)
	require.Equal(t, StateRunning, j.State)
	require.Equal(t, "crash-child", j.LockedBy)
	require.EqualValues(t, 1, j.Token)

	// A second worker reaps the expired lease and runs the job; its
	// business write and the completion commit together.
	var runs set
	var tokens []aegis.Token
	ws := workers(func(ctx context.Context, job *Job[testArgs]) error {
		runs.add(job.ID)
		tokens = append(tokens, job.Token)
		return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO effect VALUES ($1, $2)`, job.ID, int64(job.Token)); err != nil {
				return err
			}
			return job.CompleteTx(ctx, tx)
		})
	})
	w := client(t, p, &Config{
		Queues:             map[string]QueueConfig{DefaultQueue: {MaxWorkers: 4}},
		Workers:            ws,
		Lease:              time.Second,
		ReapInterval:       20 * time.Millisecond,
		CompletedRetention: time.Hour,
	})
	require.NoError(t, w.Start(ctx))
	eventually(t, "the job is completed", func() bool {
		j, err := w.Job(ctx, id)
		return err == nil && j.State == StateCompleted
	})
	stop(t, w)

	require.Equal(t, 1, runs.get(id), "the second worker ran the job once")
	require.Equal(t, []aegis.Token{3}, tokens, "reaped (token 2), then claimed (token 3)")
	require.Equal(t, 1, count(t, p, `SELECT count(*) FROM effect`))
	require.Equal(t, 3, count(t, p, `SELECT token FROM effect WHERE job_id = $1`, id))
	require.Equal(t, 1, count(t, p, `SELECT count(*) FROM aegis_job_finished WHERE id = $1 AND state = 'completed'`, id))
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job`))
	j, err = w.Job(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 2, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.EqualValues(t, 1, j.Errors[0].Token)
	require.True(t, strings.Contains(j.Errors[0].Error, "lease expired"), j.Errors[0].Error)
}
