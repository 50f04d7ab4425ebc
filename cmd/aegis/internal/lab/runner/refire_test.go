package runner

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// ms is a Unix millisecond of the constructed runs below, in the nodes'
// nanoseconds: the record's unit.
func ms(v int64) int64 { return v * int64(time.Millisecond) }

// refireCase is one tick's critical sections, as the nodes reported them
// (sections) and as the store has them (rows: the ones that committed).
type refireCase struct {
	name     string
	sections []*sectionRecord
	rows     []auditRow
	store    refireCount // what the rows count
	record   recordBand  // what the sections count
}

// committed is a section that reported its commit, stamped at stamp (0: a
// retry found its row), and its EXECUTED row.
func committed(id string, runAttempt int, enter, writing, stamp, executed int64) (*sectionRecord, auditRow) {
	s := &sectionRecord{ID: id, Job: "j", Tick: 3, Run: runAttempt, ReadCall: ms(enter), ReadResult: checker.OpOK,
		WriteCall: ms(writing), WriteResult: checker.OpOK, WriteReturn: ms(executed), Stamp: stamp}
	at := stamp
	if at == 0 {
		at = (writing + executed) / 2
	}
	return s, auditRow{Attempt: id, Job: "j", Tick: 3, RunAttempt: runAttempt, Status: "EXECUTED", Value: sql.NullInt64{Int64: 1, Valid: true}, AtMS: at, EnteredMS: enter}
}

func refireCases() []refireCase {
	a, ar := committed("1.1.1", 1, 1000, 1300, 1301, 1305)
	b, br := committed("2.1.1", 1, 1004, 1300, 1302, 1306) // beside a: a duplicate, not a re-fire
	c, cr := committed("3.1.1", 1, 1800, 2100, 2101, 2104) // after a's commit: a re-fire
	retry, retryr := committed("2.1.2", 2, 3000, 3300, 3301, 3302)
	// Killed inside its write: no outcome reported, its row landed.
	killed := &sectionRecord{ID: "1.1.2", Job: "j", Tick: 3, Run: 1, ReadCall: ms(1000), ReadResult: checker.OpOK, WriteCall: ms(1300), WriteResult: checker.OpUnknown}
	_, killedr := committed("1.1.2", 1, 1000, 1300, 1310, 1310)
	// A retry of its write found its row: stamped between writing and
	// executed, the record cannot say when.
	found, foundr := committed("3.1.2", 1, 1000, 1300, 0, 1900)
	mid, midr := committed("2.1.3", 1, 1650, 1700, 1701, 1702)
	refused := &sectionRecord{ID: "2.1.4", Job: "j", Tick: 3, Run: 1, ReadCall: ms(2000), ReadResult: checker.OpOK, WriteCall: ms(2300), WriteResult: checker.OpRefused}
	return []refireCase{
		{"one run", []*sectionRecord{a}, []auditRow{ar}, refireCount{}, recordBand{}},
		{"two at once", []*sectionRecord{a, b}, []auditRow{ar, br}, refireCount{}, recordBand{}},
		{"run again after it committed", []*sectionRecord{a, b, c}, []auditRow{ar, br, cr}, refireCount{all: 1}, recordBand{certain: 1}},
		{"a reaper's retry after the commit", []*sectionRecord{a, retry}, []auditRow{ar, retryr}, refireCount{all: 1, retried: 1}, recordBand{certain: 1}},
		{"refused after the commit", []*sectionRecord{a, refused}, []auditRow{ar}, refireCount{}, recordBand{}},
		{"an unreported commit, then a run", []*sectionRecord{killed, c}, []auditRow{killedr, cr}, refireCount{all: 1}, recordBand{uncertain: 1}},
		{"an unreported write that rolled back, then a run", []*sectionRecord{killed, c}, []auditRow{cr}, refireCount{}, recordBand{uncertain: 1}},
		{"a run inside a commit the record cannot place", []*sectionRecord{found, mid}, []auditRow{foundr, midr}, refireCount{all: 1}, recordBand{uncertain: 1}},
	}
}

// The store's count (Go over the rows, and SQL on both dialects) and the
// record's, on constructed ticks; the store's always lies in the
// record's band.
func TestRefires(t *testing.T) {
	t.Parallel()
	pg, err := sql.Open("pgx", testenv.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { pg.Close() })
	lite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "store.db"))
	require.NoError(t, err)
	t.Cleanup(func() { lite.Close() })
	dbs := map[string]*sql.DB{"postgres": pg, "sqlite": lite}
	for _, db := range dbs {
		require.NoError(t, lab.MigrateStore(t.Context(), db))
	}
	for i, tc := range refireCases() {
		ex := map[jobTick][]auditRow{{"j", 3}: tc.rows, {"other", 3}: tc.rows}
		require.Equal(t, tc.store, refiresOf(ex, "j"), tc.name)
		require.Equal(t, tc.record, recordRefires(tc.sections), tc.name)
		require.True(t, tc.record.holds(tc.store.all), "%s: the store's %d re-fires lie in the record's band %+v", tc.name, tc.store.all, tc.record)
		jr := lab.JobReport{Name: "j", Refires: tc.store.all, RetriedRefires: tc.store.retried}
		require.Empty(t, judgeRefires(&jr, tc.store, tc.record), tc.name)

		run := fmt.Sprintf("refire-%d", i)
		for name, db := range dbs {
			for _, a := range tc.rows {
				_, err := db.ExecContext(t.Context(), lab.AuditSQL, run, a.Attempt, a.Job, a.Tick, 1, 0, "", a.RunAttempt, a.Status, a.Value, a.AtMS, a.EnteredMS)
				require.NoError(t, err, "%s: %s", name, tc.name)
			}
			got, err := readRefires(t.Context(), db, run)
			require.NoError(t, err, name)
			want := map[string]refireCount{}
			if tc.store.all > 0 {
				want["j"] = tc.store
			}
			require.Equal(t, want, got, "%s: %s", name, tc.name)
		}
	}
}

// A store that lost a commit the nodes reported, or counts another re-fire
// than SQL, disagrees, and says how.
func TestRefiresDisagree(t *testing.T) {
	t.Parallel()
	jr := lab.JobReport{Name: "export"}
	require.Equal(t, "export: the store shows 0 re-fires, the nodes' events 1 (and 0 they cannot decide)",
		judgeRefires(&jr, refireCount{}, recordBand{certain: 1}))
	jr.Refires = 2
	require.Equal(t, "export: the store shows 2 re-fires, the nodes' events 0 (and 1 they cannot decide)",
		judgeRefires(&jr, refireCount{all: 2}, recordBand{uncertain: 1}))
	require.Equal(t, "export: the audit rows count 2 re-fires (0 retried), SQL 1 (0)",
		judgeRefires(&jr, refireCount{all: 1}, recordBand{certain: 2}))
}
