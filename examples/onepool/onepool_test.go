package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program's lines, with the tokens and ids it printed.
var (
	leaseLine    = regexp.MustCompile(`(?m)^lease: report/2026-10 held, the report written through the fence with token (\d+)$`)
	queueLine    = regexp.MustCompile(`(?m)^queue: job (\d+) \(send_invoice\) enqueued and worked, attempt 1, token (\d+)$`)
	ensureLine   = regexp.MustCompile(`(?m)^schedule: reconciliation ensured at version (\d+) \(@every 1s\)$`)
	runLine      = regexp.MustCompile(`(?m)^schedule: the run of reconciliation at (\S+) read back: succeeded on onepool-1, token (\d+)$`)
	electionLine = regexp.MustCompile(`(?m)^elect: onepool-1 leads onepool, term token (\d+)$`)
	observedLine = regexp.MustCompile(`(?m)^elect: observed onepool-1 leading onepool, term token (\d+)$`)
)

// number is the n-th group of re's match in out, which must be there.
func number(t *testing.T, re *regexp.Regexp, out string, n int) int64 {
	t.Helper()
	m := re.FindStringSubmatch(out)
	require.NotNil(t, m, "no line matching %s; the program printed:\n%s", re, out)
	v, err := strconv.ParseInt(m[n], 10, 64)
	require.NoError(t, err)
	return v
}

// The example program, built and run as a process twice on one schema of
// the test PostgreSQL, as its user runs it: each step's line is printed
// and its row is in the database with the token printed; the second run's
// Ensure leaves the schedule at version 1. The program imports neither
// database/sql nor pgx's stdlib: one pool serves pglease, fence, queue,
// schedule and elect.
func TestOnePool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	out, err := exec.CommandContext(ctx, "go", "list", "-f", "{{join .Imports \"\\n\"}}", ".").CombinedOutput()
	require.NoError(t, err, "go list:\n%s", out)
	imports := strings.Fields(string(out))
	require.Contains(t, imports, "github.com/jackc/pgx/v5/pgxpool")
	require.NotContains(t, imports, "database/sql", "the program's imports")
	require.NotContains(t, imports, "github.com/jackc/pgx/v5/stdlib", "the program's imports")

	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "onepool")
	out, err = exec.CommandContext(bctx, "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build ./examples/onepool:\n%s", out)

	url := testenv.PostgresURL(t)
	run := func() string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // the program gives up after one
		defer cancel()
		cmd := exec.CommandContext(rctx, bin)
		cmd.Env = append(os.Environ(), "AEGIS_POSTGRES_URL="+url)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the program's exit; it printed:\n%s", out)
		require.NotContains(t, string(out), url, "the URL is never printed")
		return string(out)
	}
	first := run()
	second := run()

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	row := func(sql string, args []any, dest ...any) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(dest...), "%s", sql)
	}

	// The lease: the report's row carries the second run's token, a
	// greater one than the first's.
	t1, t2 := number(t, leaseLine, first, 1), number(t, leaseLine, second, 1)
	require.Greater(t, t2, t1, "the second holder's token")
	var token int64
	var writer string
	row(`SELECT token, node FROM onepool_report WHERE month = '2026-10'`, nil, &token, &writer)
	require.Equal(t, t2, token)
	require.Equal(t, "onepool-1", writer)

	// The queue: the second run's job, worked and completed.
	for _, out := range []string{first, second} {
		id, jt := number(t, queueLine, out, 1), number(t, queueLine, out, 2)
		var state string
		row(`SELECT state FROM aegis_job_finished WHERE id = $1`, []any{id}, &state)
		require.Equal(t, "completed", state, "job %d", id)
		if out == second {
			var job int64
			row(`SELECT job_id, token FROM onepool_invoice WHERE customer = 'acme'`, nil, &job, &token)
			require.Equal(t, []int64{id, jt}, []int64{job, token})
		}
	}

	// The schedule: created at version 1 and left there by the second
	// run's Ensure; each run's tick read back with the token its handler
	// wrote.
	require.EqualValues(t, 1, number(t, ensureLine, first, 1))
	require.EqualValues(t, 1, number(t, ensureLine, second, 1), "the second run's Ensure")
	var version int64
	row(`SELECT version FROM aegis_schedule WHERE name = 'reconciliation'`, nil, &version)
	require.EqualValues(t, 1, version)
	for _, out := range []string{first, second} {
		m := runLine.FindStringSubmatch(out)
		require.NotNil(t, m, "no run read back; the program printed:\n%s", out)
		fire, err := time.Parse(time.RFC3339, m[1])
		require.NoError(t, err)
		rt := number(t, runLine, out, 2)
		var state string
		row(`SELECT state, token FROM aegis_schedule_run WHERE job = 'reconciliation' AND fire_at = $1`, []any{fire}, &state, &token)
		require.Equal(t, []any{"succeeded", rt}, []any{state, token})
		row(`SELECT token FROM onepool_reconciliation WHERE fire_at = $1`, []any{fire}, &token)
		require.Equal(t, rt, token, "the handler's fenced write, with its run's token")
	}

	// The election: the second term's token is greater, and the leader's
	// row has it.
	e1, e2 := number(t, electionLine, first, 1), number(t, electionLine, second, 1)
	require.Greater(t, e2, e1, "the second term's token")
	require.Equal(t, e2, number(t, observedLine, second, 1), "the observer saw the leader's record, from the board on the pool")
	row(`SELECT term FROM onepool_leader WHERE name = 'onepool'`, nil, &token)
	require.Equal(t, e2, token)
}
