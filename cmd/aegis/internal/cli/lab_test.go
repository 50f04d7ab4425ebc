package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// A run that proves nothing exits 3, not 0, and says why: its nodes refuse
// an etcd TTL that is not whole seconds and run no tick.
func TestLabRunInconclusiveExit(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "lab", "run", "--strategy", "etcd", "--nodes", "2", "--duration", "1s", "--tick", "250ms", "--ttl", "1500ms",
		"--catalog", "export=250ms/40ms", "--dir", t.TempDir(), "--postgres-url", testenv.PostgresURL(t), "--etcd-endpoints", strings.Join(testenv.EtcdEndpoints(t), ","))
	require.Equal(t, 3, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "\nverdict: inconclusive: 2 of 2 nodes exited on their configuration (node1, node2: ")
	require.Contains(t, stdout, "ttl 1.5s is not a whole number of seconds: etcd leases are whole seconds); 4 of 4 job ticks missed: 0 executed, fewer than 50%\n")
	require.Regexp(t, `(?m)^aegis lab: etcd, fenced, .*: inconclusive: 2 of 2 nodes exited on their configuration`, stderr)
}

// The JSON report is a contract (docs/design.md section 8): one object on
// standard output, exactly these fields.
func TestLabRunJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "lab", "run", "--strategy", "none", "--nodes", "2", "--duration", "1s", "--tick", "250ms",
		"--catalog", "export=250ms/40ms", "--json", "--out", t.TempDir(), "--dir", t.TempDir(), "--postgres-url", testenv.PostgresURL(t))
	require.Equal(t, 0, code, stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), "stdout is one JSON object: %s", stdout)
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Subset(t, keys, []string{"checker", "config", "duplicate_ticks", "duplicates_applied", "duration_s", "events", "executions", "fenced",
		"harms", "inconclusive", "jobs", "lost_updates", "missed_ticks", "nodes", "notes", "refires", "retried_refires", "run", "scenario", "stale_rejected",
		"store_agrees", "strategy", "ticks", "unsafe", "verdict"})
	require.Subset(t, []string{"checker", "config", "duplicate_ticks", "duplicates_applied", "duration_s", "events", "executions", "fenced",
		"harms", "inconclusive", "jobs", "lost_updates", "missed_ticks", "nodes", "notes", "refires", "retried_refires", "run", "scenario", "stale_rejected",
		"store_agrees", "strategy", "ticks", "unsafe", "verdict", "visualisation"}, keys, "nothing else (visualisation on a violation)")
	require.Equal(t, true, got["store_agrees"], "the checker agrees with SQL over the audit and ledger tables")
	jobs := got["jobs"].([]any)
	require.Len(t, jobs, 1)
	require.Equal(t, "export", jobs[0].(map[string]any)["name"])
	require.Equal(t, "export=250ms/40ms", got["config"].(map[string]any)["catalog"])
	require.Equal(t, "none", got["strategy"])
	require.Equal(t, false, got["fenced"], "none has no token to fence with")
	require.EqualValues(t, 4, got["ticks"])
	// A node whose timer fires past a tick's starting deadline (a loaded
	// machine) reports the tick misfired instead of running it.
	misfired := 0
	for _, e := range got["events"].([]any) {
		if e.(map[string]any)["kind"] == "misfired" {
			misfired++
		}
	}
	require.EqualValues(t, 8-misfired, got["executions"], "each of the two nodes ran each tick it did not report misfired")
	require.Positive(t, got["duplicates_applied"])
	require.NotEmpty(t, got["events"])
}

func TestLabUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--addr", "7070"}, `--addr "7070": want host:port`},
		{[]string{"lab", "--addr", "127.0.0.1:7070", "extra"}, `unexpected argument "extra"`},
		{[]string{"lab", "walk"}, `unknown action "walk"`},
		{[]string{"lab", "run"}, "--strategy is required"},
		{[]string{"lab", "run", "--strategy", "mutex"}, `--strategy "mutex": unknown`},
		{[]string{"lab", "run", "--strategy", "none", "--nodes", "0"}, "--nodes 0: want 1 to 16"},
		{[]string{"lab", "run", "--strategy", "none", "--chaos", "nap:holder@1s"}, `chaos "nap:holder@1s": unknown kind "nap"`},
		{[]string{"lab", "run", "--strategy", "none", "--chaos", "pause:node4@1s+1s"}, "node4 does not exist: the run has 3 nodes"},
		{[]string{"lab", "run", "--strategy", "pg-lease", "--chaos", "failover:redis@1s"}, "failover:redis needs a strategy on the Redis primary with a replica"},
		{[]string{"lab", "run", "--strategy", "sqlite", "--chaos", "partition:holder@1s+1s"}, "sqlite has no network to partition"},
		{[]string{"lab", "run", "--scenario", "nope"}, `--scenario "nope": unknown`},
		{[]string{"lab", "run", "--scenario", "aegis", "--nodes", "2"}, "--scenario aegis sets the runs itself: drop --nodes"},
		{[]string{"inspect", "--postgres-url", "postgres://x", "who"}, `unknown query "who"`},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, tt.args...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want, "%v", tt.args)
	}
}

// Without --postgres-url and AEGIS_POSTGRES_URL, inspect says what it
// needs. Not parallel: it unsets the variable, which make test sets.
func TestInspectNeedsURL(t *testing.T) {
	t.Setenv("AEGIS_POSTGRES_URL", "")
	code, _, stderr := run(t, "inspect", "--postgres-url", "", "stuck")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--postgres-url (or AEGIS_POSTGRES_URL) is required")
}

func TestInspect(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	code, _, stderr := run(t, "lab", "run", "--strategy", "none", "--nodes", "2", "--duration", "500ms", "--tick", "250ms",
		"--work", "40ms", "--json", "--out", t.TempDir(), "--dir", t.TempDir(), "--postgres-url", url)
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := run(t, "inspect", "--postgres-url", url)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "stuck — stuck RUNNING")
	require.Contains(t, stdout, "expired — ")
	require.Contains(t, stdout, "(skipped: no table aegis_lease here)")
	require.Contains(t, stdout, "duplicates — recent duplicate executions")
	require.Regexp(t, `lab-\S+/\S+\s+0\s+1\s+\d\s+EXECUTED`, stdout, "the token history lists the lab's rows, by job")
	require.Regexp(t, `\S+\s+\S+\s+1\s+2\s+(1:t0, 2:t0|2:t0, 1:t0)`, stdout, "none applies a job's tick 1 twice")
}

// A preset of several runs prints one object: the scenario, its runs'
// reports, and the strategies that could not run.
func TestScenarioJSON(t *testing.T) {
	t.Parallel()
	sc, ok := lab.LookupScenario("seat-assignment")
	require.True(t, ok)
	reports := []*lab.Report{
		{Scenario: sc.Name, Strategy: "redis", Unavailable: "the redis backend is not in this build"},
		{Scenario: sc.Name, Strategy: "pg-unique", Nodes: 3, DurationS: 8, Ticks: 8, Executions: 8, Checker: lab.CheckOK, Verdict: lab.VerdictOK, Inconclusive: []string{}, Events: []lab.Event{},
			Harms: []lab.Harm{}, Unsafe: []lab.Harm{}, StoreAgrees: true, Jobs: []lab.JobReport{}, Notes: []string{}},
	}
	var b strings.Builder
	require.NoError(t, writeReports(&b, sc, reports, true))
	golden(t, "scenario.json.golden", b.String())
}

// Without --out, the checker's visualisation of a violation goes under
// $TMPDIR, not into the current directory, and its path is printed. Not
// parallel: it sets TMPDIR.
func TestLabRunVisualisationInTMPDIR(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cwd, err := os.Getwd()
	require.NoError(t, err)
	before, err := filepath.Glob(filepath.Join(cwd, "aegis-lab-*"))
	require.NoError(t, err)
	// Two nodes run the one tick, unfenced, each reading the ledger at the
	// tick and writing it 900 ms later.
	code, stdout, stderr := run(t, "lab", "run", "--strategy", "none", "--nodes", "2", "--duration", "1s", "--tick", "1s",
		"--catalog", "export=1s/900ms", "--json", "--postgres-url", testenv.PostgresURL(t))
	require.Equal(t, 0, code, stderr)
	after, err := filepath.Glob(filepath.Join(cwd, "aegis-lab-*"))
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written into the current directory")

	var rep lab.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	read := map[int64]int{} // balance read → critical sections that read it
	for _, e := range rep.Events {
		if e.Kind == lab.EventEntered && e.Value != nil {
			read[*e.Value]++
		}
	}
	misfired := 0 // a node whose timer fired past the tick's starting deadline (a loaded machine) says so
	for _, e := range rep.Events {
		if e.Kind == lab.EventMisfired && e.Node != 0 {
			misfired++
		}
	}
	require.Equal(t, 2-misfired, rep.Executions, "both nodes ran the tick, or said why not")
	if len(read) == 1 {
		// Both read the same balance and both committed: no order explains
		// it, so the checker's verdict is forced.
		require.Equal(t, lab.CheckViolation, rep.Checker)
	}
	if rep.Checker == lab.CheckViolation {
		m := regexp.MustCompile(`visualisation of the violation: (\S+)`).FindStringSubmatch(stderr)
		require.NotNil(t, m, "the path is printed: %s", stderr)
		require.Equal(t, tmp, filepath.Dir(filepath.Dir(m[1])), "a folder per run in $TMPDIR")
		require.FileExists(t, m[1])
	}
}
