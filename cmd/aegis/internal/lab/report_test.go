package lab

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// clean is a run that proves what it shows: 10 job ticks, 9 executed, no
// harm, every check done.
func clean() *Report {
	r := &Report{Strategy: "pg-lease", Nodes: 3, Harms: []Harm{}, StoreAgrees: true}
	r.Add(JobReport{Name: "invoice-export", Ticks: 6, MissedTicks: 1, Checker: CheckOK})
	r.Add(JobReport{Name: "seat-assignment", Ticks: 4, Checker: CheckOK})
	return r
}

// Each reason a run proves nothing makes it inconclusive and is said with
// its numbers; a run without it is not; a harm wins over every reason.
func TestConclude(t *testing.T) {
	t.Parallel()
	r := clean()
	r.Conclude(nil, nil)
	require.Equal(t, VerdictOK, r.Verdict, "9 of 10 ticks executed, no node refused, every fault landed")
	require.Empty(t, r.Inconclusive)
	require.NotNil(t, r.Inconclusive, "the JSON says [] for a run with no reason")

	for _, tt := range []struct {
		name   string
		change func(r *Report) (configExits, unapplied []string)
		want   string
	}{
		{"a node exited on its configuration", func(r *Report) ([]string, []string) {
			return []string{"node1: schedule: invoice-export: ttl 760ms is not a whole number of seconds"}, nil
		}, "1 of 3 nodes exited on their configuration (node1: schedule: invoice-export: ttl 760ms is not a whole number of seconds)"},
		{"every tick missed", func(r *Report) ([]string, []string) {
			r.MissedTicks = r.Ticks
			return nil, nil
		}, "10 of 10 job ticks missed: 0 executed, fewer than 50%"},
		{"fewer than half executed", func(r *Report) ([]string, []string) {
			r.MissedTicks = 6
			return nil, nil
		}, "6 of 10 job ticks missed: 4 executed, fewer than 50%"},
		{"no tick fired", func(r *Report) ([]string, []string) {
			r.Ticks, r.MissedTicks = 0, 0
			return nil, nil
		}, "no job tick fired"},
		{"a fault found no target", func(r *Report) ([]string, []string) {
			return nil, []string{"pause:holder@1s+2s: no node entered the critical section in the 5s it waited, to the run's end: nothing to target"}
		}, "a fault did not happen: pause:holder@1s+2s: no node entered the critical section in the 5s it waited, to the run's end: nothing to target"},
		{"a check ran out of time", func(r *Report) ([]string, []string) {
			r.Jobs[1].Checker = CheckUnknown
			return nil, nil
		}, "the check of seat-assignment ran out of time: its history is not judged"},
	} {
		r := clean()
		exits, unapplied := tt.change(r)
		r.Conclude(exits, unapplied)
		require.Equal(t, VerdictInconclusive, r.Verdict, tt.name)
		require.Equal(t, []string{tt.want}, r.Inconclusive, tt.name)
		var b bytes.Buffer
		require.NoError(t, r.WriteSummary(&b))
		require.Contains(t, b.String(), "\nverdict: inconclusive: "+tt.want+"\n", tt.name)

		r.Harms = []Harm{HarmDuplicate}
		r.Conclude(exits, unapplied)
		require.Equal(t, VerdictHarmed, r.Verdict, "%s: a harm seen is a proof, however little else the run did", tt.name)
		require.Equal(t, []string{tt.want}, r.Inconclusive, "%s: the reason stays in the report", tt.name)
		b.Reset()
		require.NoError(t, r.WriteSummary(&b))
		require.Contains(t, b.String(), "\nverdict: harmed (and inconclusive): "+tt.want+"\n", tt.name)
	}

	// A tick whose critical section a node entered, refused by the fence
	// (after restart:redis, every write until the tokens catch up) or cut
	// short, was exercised: it counts toward the share.
	r = clean()
	r.MissedTicks = 6
	r.Table = []TickRow{{Tick: 1, Cells: []string{"STALE t2", ""}, Note: "missed; fence refused 1"}, {Tick: 2, Cells: []string{"", "ENTER t3"}, Note: "missed"},
		{Tick: 3, Cells: []string{"", ""}, Note: "missed"}, {Tick: 4, Cells: []string{"EXEC t4", "STALE t1"}}}
	r.Conclude(nil, nil)
	require.Equal(t, VerdictOK, r.Verdict, "4 executed and 2 refused or cut short of 10: %v", r.Inconclusive)
	r.MissedTicks = 8
	r.Conclude(nil, nil)
	require.Equal(t, []string{"8 of 10 job ticks missed: 2 executed and 2 more entered (refused or cut short), fewer than 50%"}, r.Inconclusive)

	// Exactly half executed is enough: the share is a floor.
	r = clean()
	r.MissedTicks = 5
	r.Conclude(nil, nil)
	require.Equal(t, VerdictOK, r.Verdict, "5 of 10 executed")

	// A violation the checker alone sees (a stale token accepted) is a harm.
	r = clean()
	r.Checker = CheckViolation
	r.MissedTicks = 10
	r.Conclude(nil, nil)
	require.Equal(t, VerdictHarmed, r.Verdict)

	// The reasons add up.
	r = clean()
	r.MissedTicks = 10
	r.Conclude([]string{"node3: x: ttl", "node1: x: ttl", "node2: z"}, []string{"kill:committer@2s: y"})
	require.Equal(t, VerdictInconclusive, r.Verdict)
	require.Equal(t, []string{"3 of 3 nodes exited on their configuration (node1, node3: x: ttl; node2: z)", "10 of 10 job ticks missed: 0 executed, fewer than 50%", "a fault did not happen: kill:committer@2s: y"}, r.Inconclusive)
}

// The comparison table of a preset has a verdict column and says why a
// run is inconclusive.
func TestWriteComparisonVerdict(t *testing.T) {
	t.Parallel()
	ok, empty := clean(), clean()
	ok.Conclude(nil, nil)
	empty.Strategy, empty.MissedTicks = "etcd", 10
	empty.Conclude(nil, nil)
	var b bytes.Buffer
	require.NoError(t, WriteComparison(&b, []*Report{ok, empty}))
	require.Regexp(t, `(?m)^\s*strategy\s.*\schecker\s+verdict\s*$`, b.String())
	require.Regexp(t, `(?m)^\s*pg-lease\s.*\sok\s+ok\s*$`, b.String())
	require.Regexp(t, `(?m)^\s*etcd\s.*\sok\s+inconclusive\s*$`, b.String())
	require.Contains(t, b.String(), "inconclusive (etcd, no): 10 of 10 job ticks missed: 0 executed, fewer than 50%\n")
}
