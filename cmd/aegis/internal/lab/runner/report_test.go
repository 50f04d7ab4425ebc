package runner

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
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

// sampleReport is the example report of docs/design.md section 8
// (testdata/report.json.golden), over one job: pg-lease fenced, the holder
// paused past its TTL in tick 3, and its late write refused.
func sampleReport() *lab.Report {
	c := lab.DefaultConfig()
	c.Strategy, c.Duration = "pg-lease", 4*time.Second
	c.Catalog = []lab.JobSpec{{Name: "invoice-export", Every: time.Second, Work: 300 * time.Millisecond}}
	c.Chaos = []lab.Chaos{{Kind: lab.Pause, Target: lab.Holder, At: 2 * time.Second, For: 3 * time.Second}}
	sections := []*sectionRecord{
		{ID: "1.1.1", Job: "invoice-export", Node: 1, Tick: 1, Token: 1, ReadCall: 1, Read: 0, ReadResult: checker.OpOK, WriteCall: 2, WriteResult: checker.OpOK},
		{ID: "2.1.1", Job: "invoice-export", Node: 2, Tick: 2, Token: 2, ReadCall: 3, Read: 1, ReadResult: checker.OpOK, WriteCall: 4, WriteResult: checker.OpOK},
		{ID: "3.1.1", Job: "invoice-export", Node: 3, Tick: 3, Token: 3, ReadCall: 5, Read: 2, ReadResult: checker.OpOK, WriteCall: 8, WriteResult: checker.OpRefused},
		{ID: "1.1.2", Job: "invoice-export", Node: 1, Tick: 4, Token: 4, ReadCall: 6, Read: 2, ReadResult: checker.OpOK, WriteCall: 7, WriteResult: checker.OpOK},
	}
	fires := map[string][]int{"invoice-export": {1, 2, 3, 4}}
	job := lab.JobReport{Name: "invoice-export", Every: "1s", Work: "300ms", Ticks: 4, Executions: 4, StaleRejected: 1, MissedTicks: 1,
		Ledger: 3, Checker: lab.CheckOK, Harms: []lab.Harm{}}
	r := &lab.Report{
		Strategy: "pg-lease", Fenced: true, Nodes: 3, DurationS: 4, Run: "20261201T000000-00000000",
		Harms: []lab.Harm{}, Unsafe: []lab.Harm{}, StoreAgrees: true, ConfigJSON: c.JSON(), Config: c,
		Events: []lab.Event{
			{T: 0, Kind: lab.EventTick, Tick: 1},
			{T: 0.012, Kind: lab.EventAcquired, Node: 1, Job: "invoice-export", Tick: 1, Token: 1},
			{T: 0.015, Kind: lab.EventEntered, Node: 1, Job: "invoice-export", Tick: 1, Token: 1, Attempt: "1.1.1", Value: i64(0)},
			{T: 0.321, Kind: lab.EventExecuted, Node: 1, Job: "invoice-export", Tick: 1, Token: 1, Attempt: "1.1.1", Value: i64(1)},
			{T: 2.003, Kind: lab.EventChaos, Node: 3, Detail: "pause:holder@2s+3s: node3 (pid 4242) paused with SIGSTOP for 3s, the holder, inside invoice-export tick 3 with token 3"},
			{T: 5.004, Kind: lab.EventStale, Node: 3, Job: "invoice-export", Tick: 3, Token: 3, Attempt: "3.1.1", Detail: "write"},
		},
		Notes: []string{},
		Table: tickTable(3, c.Catalog, fires, sections),
	}
	r.Add(job)
	r.Conclude(nil, nil)
	return r
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
	unfenced.Fenced, unfenced.StaleRejected, unfenced.DuplicatesApplied, unfenced.LostUpdates, unfenced.Checker = false, 0, 1, 1, lab.CheckViolation
	unavailable := &lab.Report{Strategy: "redis", Fenced: true, Unavailable: "the redis backend is not in this build"}
	unfenced.Conclude(nil, nil)
	none := &lab.Report{Strategy: "none", Ticks: 4, Executions: 12, DuplicateTicks: 4, DuplicatesApplied: 4, LostUpdates: 8, Checker: lab.CheckViolation}
	none.Conclude(nil, nil)
	b.Reset()
	require.NoError(t, lab.WriteComparison(&b, []*lab.Report{none, unfenced, r, unavailable}))
	golden(t, "comparison.txt.golden", b.Bytes())
}

func TestTickTable(t *testing.T) {
	t.Parallel()
	jobs := []lab.JobSpec{{Name: "a", Every: time.Second}, {Name: "b", Every: 2 * time.Second}}
	rows := tickTable(2, jobs, map[string][]int{"a": {1, 2}, "b": {2}}, []*sectionRecord{
		{Job: "a", Node: 1, Tick: 1, Token: 1, ReadResult: checker.OpOK, WriteResult: checker.OpOK},
		{Job: "a", Node: 2, Tick: 1, Token: 2, ReadResult: checker.OpOK, WriteResult: checker.OpOK},
		{Job: "a", Node: 2, Tick: 2, ReadResult: checker.OpOK, WriteResult: checker.OpUnknown},
		{Job: "a", Node: 1, Tick: 2, Token: 4, ReadResult: checker.OpRefused},
		{Job: "b", Node: 1, Tick: 2, Token: 5, ReadResult: checker.OpUnknown}, // never read: not shown
	})
	require.Equal(t, []lab.TickRow{
		{Job: "a", Tick: 1, Cells: []string{"EXEC t1", "EXEC t2"}, Note: "DUPLICATE: applied 2 times"},
		{Job: "a", Tick: 2, Cells: []string{"STALE t4", "ENTER"}, Note: "missed; fence refused 1"},
		{Job: "b", Tick: 2, Cells: []string{"", ""}, Note: "missed"},
	}, rows)
}
