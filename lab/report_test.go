package lab

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	require.Equal(t, string(want), string(got))
}

func i64(v int64) *int64 { return &v }

// sampleReport is DESIGN.md's example: pg-lease fenced, the holder paused
// past its TTL in tick 3, replaced, and its late write refused.
func sampleReport() *Report {
	c := DefaultConfig()
	c.Strategy, c.Duration = "pg-lease", 4*time.Second
	c.Chaos = []Chaos{{Kind: Pause, Target: Holder, At: 2 * time.Second, For: 3 * time.Second}}
	attempts := []Attempt{
		{ID: "1.1.1", Node: 1, Tick: 1, Token: 1, Read: 0, Outcome: Committed},
		{ID: "2.1.1", Node: 2, Tick: 2, Token: 4, Read: 1, Outcome: Committed},
		{ID: "3.1.1", Node: 3, Tick: 3, Token: 7, Read: 2, Outcome: Refused},
		{ID: "1.1.2", Node: 1, Tick: 3, Token: 8, Read: 2, Outcome: Committed},
		{ID: "1.1.3", Node: 1, Tick: 4, Token: 9, Read: 3, Outcome: Committed},
	}
	return &Report{
		Strategy: "pg-lease", Fenced: true, Nodes: 3, DurationS: 4, Ticks: 4,
		Executions: 5, DuplicateTicks: 1, StaleRejected: 1, Checker: CheckOK, Balance: 4,
		Events: []Event{
			{T: 0, Kind: EventTick, Tick: 1},
			{T: 0.012, Kind: EventAcquired, Node: 1, Tick: 1, Token: 1},
			{T: 0.015, Kind: EventEntered, Node: 1, Tick: 1, Token: 1, Attempt: "1.1.1", Value: i64(0)},
			{T: 0.321, Kind: EventExecuted, Node: 1, Tick: 1, Token: 1, Attempt: "1.1.1", Value: i64(1)},
			{T: 2.003, Kind: EventChaos, Node: 3, Detail: "pause:holder@2s+3s: node3 (pid 4242) paused with SIGSTOP for 3s, the holder, inside tick 3 with token 7"},
			{T: 5.004, Kind: EventStale, Node: 3, Tick: 3, Token: 7, Attempt: "3.1.1", Detail: "write"},
		},
		Config: c,
		Table:  tickTable(4, 3, attempts),
	}
}

func TestReportGolden(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	var b bytes.Buffer
	require.NoError(t, json.NewEncoder(&b).Encode(r))
	golden(t, "report.json.golden", b.Bytes())

	b.Reset()
	require.NoError(t, r.WriteSummary(&b))
	golden(t, "report.txt.golden", b.Bytes())

	unfenced := sampleReport()
	unfenced.Fenced, unfenced.StaleRejected, unfenced.DuplicatesApplied, unfenced.LostUpdates, unfenced.Checker = false, 0, 1, 1, CheckViolation
	unavailable := &Report{Strategy: "redis", Fenced: true, Unavailable: "the redis backend is not in this build"}
	none := &Report{Strategy: "none", Ticks: 4, Executions: 12, DuplicateTicks: 4, DuplicatesApplied: 4, LostUpdates: 8, Checker: CheckViolation}
	b.Reset()
	require.NoError(t, WriteComparison(&b, []*Report{none, unfenced, r, unavailable}))
	golden(t, "comparison.txt.golden", b.Bytes())
}

func TestTickTable(t *testing.T) {
	t.Parallel()
	rows := tickTable(3, 2, []Attempt{
		{Node: 1, Tick: 1, Token: 1, Read: 0, Outcome: Committed},
		{Node: 2, Tick: 1, Token: 2, Read: 0, Outcome: Committed},
		{Node: 2, Tick: 2, Read: 1, Outcome: Unknown},
		{Node: 1, Tick: 2, Token: 4, Read: -1, Outcome: Refused},
		{Node: 1, Tick: 2, Token: 5, Read: -1, Outcome: Unknown}, // never read: not shown
	})
	require.Equal(t, []TickRow{
		{Tick: 1, Cells: []string{"EXEC t1", "EXEC t2"}, Note: "DUPLICATE: applied 2 times"},
		{Tick: 2, Cells: []string{"STALE t4", "ENTER"}, Note: "missed; fence refused 1"},
		{Tick: 3, Cells: []string{"", ""}, Note: "missed"},
	}, rows)
}
