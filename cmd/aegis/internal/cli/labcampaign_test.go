package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// A campaign's replay line, parsed by the flags of `aegis lab run`, is the
// run it replays: every run drawn for every strategy, fenced and not.
func TestLabCampaignReplayRoundTrip(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{true, false} {
		for _, name := range lab.StrategyNames() {
			cfgs, err := runner.Campaign{Seed: 11, Runs: 20, Fence: fence}.Configs(name)
			require.NoError(t, err)
			for _, want := range cfgs {
				fs := newFlagSet("lab", io.Discard, labUsage)
				config := runFlags(fs)
				require.NoError(t, fs.parse(runner.RunArgs(want)))
				require.Zero(t, fs.NArg())
				got := config()
				require.Equal(t, want, got, "%s", want)
				require.NoError(t, got.Validate())
			}
		}
	}
}

func TestLabCampaignUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs 0: want 1 to 1000"},
		{[]string{"--runs", "1001"}, "--runs 1001: want 1 to 1000"},
		{[]string{"--strategy", "sqlite", "--strategy", "mutex"}, `--strategy "mutex": unknown (known: none, sqlite,`},
		{[]string{"--strategy", "sqlite", "--strategy", "sqlite"}, "--strategy sqlite: given twice"},
		{[]string{"--tick", "1ms"}, "--tick 1ms: want 10ms to 1m"},
		{[]string{"--seed", "-1"}, `invalid value "-1" for flag -seed`},
		{[]string{"--runs", "2", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		code, stdout, stderr := run(t, append([]string{"lab", "campaign"}, tt.args...)...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want, "%v", tt.args)
		require.Empty(t, stdout, "%v", tt.args)
	}
	code, _, stderr := run(t, "lab", "campaign", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "usage: aegis lab campaign --seed N --runs K")
}

// campaignJSON is the --json output, as a script reads it.
type campaignJSON struct {
	Seed       uint64 `json:"seed"`
	Runs       int    `json:"runs"`
	Strategies []struct {
		Strategy     string         `json:"strategy"`
		Fenced       bool           `json:"fenced"`
		LabelledSafe bool           `json:"labelled_safe"`
		Runs         int            `json:"runs"`
		Harmed       int            `json:"harmed"`
		Unsafe       int            `json:"unsafe"`
		Agree        int            `json:"agree"`
		Inconclusive int            `json:"inconclusive"`
		Refires      int            `json:"refires"`
		RefiresOut   int            `json:"refires_excluded"`
		Harms        map[string]int `json:"harms"`
		UnsafeRuns   []struct {
			Command string   `json:"command"`
			Harms   []string `json:"harms"`
		} `json:"harmed_runs"`
		InconclusiveRuns []struct {
			Command string   `json:"command"`
			Reasons []string `json:"reasons"`
		} `json:"inconclusive_runs"`
		Skipped string `json:"skipped"`
	} `json:"strategies"`
	DurationS float64 `json:"duration_s"`
}

// A short real campaign: two runs of sqlite, fenced, four 300ms ticks.
// Whether a run does harm is the campaign's finding, not the test's: the
// test holds the campaign to its contract (the row, the counts, the exit
// status that follows from them, the replay lines).
func TestLabCampaign(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	args := func(extra ...string) []string {
		return append([]string{"lab", "campaign", "--seed", "1", "--runs", "2", "--strategy", "sqlite", "--tick", "300ms", "--ticks", "4",
			"--dir", t.TempDir(), "--postgres-url", url}, extra...)
	}
	t.Run("table", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := run(t, args()...)
		m := regexp.MustCompile(`(?m)^sqlite\s+yes\s+ledger kept, once per tick while clocks agree\s+2\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(stdout)
		require.NotNil(t, m, "the table has sqlite's row, fenced, its guarantee, 2 runs:\n%s\n%s", stdout, stderr)
		harmed, _ := strconv.Atoi(m[1])
		unsafe, _ := strconv.Atoi(m[2])
		agree, _ := strconv.Atoi(m[3])
		inconclusive, _ := strconv.Atoi(m[4])
		require.Regexp(t, fmt.Sprintf(`: 2 runs in \S+, %d inconclusive\n`, inconclusive), stdout)
		require.Equal(t, inconclusive, strings.Count(stdout, "    aegis lab run --strategy sqlite --fence=true ")-harmed, "a replay line per inconclusive run:\n%s", stdout)
		require.LessOrEqual(t, agree, 2)
		require.LessOrEqual(t, unsafe, harmed)
		require.Equal(t, 2, strings.Count(stderr, "aegis lab campaign: ["), "a progress line per run: %s", stderr)
		switch {
		case unsafe > 0 || agree < 2:
			require.Equal(t, 1, code, "a run with a harm its label excludes, or a checker that disagrees, fails the campaign: %s", stderr)
			require.Contains(t, stderr, "sqlite ("+m[2]+" of 2 runs unsafe")
		case inconclusive > 0:
			require.Equal(t, 1, code, "1 of 2 runs inconclusive is more than 10%%: %s", stderr)
			require.Contains(t, stderr, fmt.Sprintf("campaign: %d of 2 runs inconclusive, more than 10%%: they prove nothing (sqlite %d of 2)", inconclusive, inconclusive))
		default:
			require.Equal(t, 0, code, stderr)
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := run(t, args("--json")...)
		var got campaignJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &got), "stdout is one JSON object: %s\n%s", stdout, stderr)
		require.Equal(t, uint64(1), got.Seed)
		require.Equal(t, 2, got.Runs)
		require.Positive(t, got.DurationS)
		require.Len(t, got.Strategies, 1)
		s := got.Strategies[0]
		require.Equal(t, "sqlite", s.Strategy)
		require.True(t, s.Fenced)
		require.True(t, s.LabelledSafe)
		require.Empty(t, s.Skipped)
		require.Equal(t, 2, s.Runs)
		require.Len(t, s.UnsafeRuns, s.Harmed)
		require.LessOrEqual(t, s.Agree, 2)
		require.NotNil(t, s.Harms)
		require.LessOrEqual(t, s.RefiresOut, s.Refires)
		if s.RefiresOut > 0 {
			require.Positive(t, s.Unsafe, "a re-fire sqlite's label excludes makes its run unsafe")
		}
		for _, u := range s.UnsafeRuns {
			require.NotEmpty(t, u.Harms)
			require.Regexp(t, `^aegis lab run --strategy sqlite --fence=true --nodes [345] --duration 1.2s --tick 300ms `, u.Command)
		}
		require.Len(t, s.InconclusiveRuns, s.Inconclusive)
		for _, u := range s.InconclusiveRuns {
			require.NotEmpty(t, u.Reasons)
		}
		require.Equal(t, map[bool]int{true: 1, false: 0}[s.Unsafe > 0 || s.Agree < s.Runs || s.Inconclusive > 0], code, stderr)
	})
}
