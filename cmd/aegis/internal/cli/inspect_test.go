package cli

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// Inspect's missed and lost answer from the history real schedulers left:
// orphan's missed ticks with their cause and recorder, and nightly's
// refused attempt with the attempt that took its tick.
func TestInspectMissedAndLost(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	h := historytest.Make(t, historytest.OpenPostgres(t))

	code, stdout, stderr := run(t, "inspect", "--postgres-url", url, "lost", "missed")
	require.Equal(t, 0, code, stderr)
	missed, lost, ok := strings.Cut(stdout, "\nlost — ")
	require.True(t, ok, "missed first, then lost, as inspect orders them: %s", stdout)
	require.True(t, strings.HasPrefix(missed, "missed — missed ticks: ticks no replica started by their starting deadline"), stdout)
	require.Regexp(t, `namespace\s+job\s+fire_at\s+cause\s+recorded_by\s+recorded_at\s+detail`, missed)
	for _, m := range h.Missed {
		require.Regexp(t, `\n  default\s+orphan\s+`+regexp.QuoteMeta(m.Fire.Format(time.RFC3339Nano))+`\s+unbound\s+watcher\s+`+
			regexp.QuoteMeta(m.Recorded.Format(time.RFC3339Nano))+`\s+`+regexp.QuoteMeta(m.Detail)+`\n`, missed)
	}
	require.Regexp(t, `namespace\s+job\s+fire_at\s+node\s+token\s+attempt\s+outcome\s+ended_at\s+taken_by\s+error`, lost)
	a, s := h.Holder, h.Successor
	require.Regexp(t, `\n  default\s+nightly\s+`+regexp.QuoteMeta(a.Fire.Format(time.RFC3339Nano))+`\s+holder\s+`+fmt.Sprint(a.Token)+`\s+1\s+refused\s+`+
		regexp.QuoteMeta(a.Ended.Format(time.RFC3339Nano))+`\s+`+regexp.QuoteMeta(fmt.Sprintf("successor:%d (attempt 2, succeeded)", s.Token))+`\s+`+regexp.QuoteMeta(a.Error)+`\n`, lost)
	require.NotContains(t, lost, "orphan", "no attempt of orphan")
	require.NotContains(t, stdout, "stuck —", "only the queries asked")

	// All of them: the history's right after stuck.
	code, stdout, stderr = run(t, "inspect", "--postgres-url", url)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?s)^stuck — .*\nmissed — .*\nlost — .*\nexpired — .*\ntokens — .*\nduplicates — `, stdout)

	// Another namespace has none.
	code, stdout, stderr = run(t, "inspect", "--postgres-url", url, "--namespace", "other", "missed", "lost")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 2, strings.Count(stdout, "  (none)\n"), stdout)
}

// Lost finds a refused attempt however many attempts of a frequent
// schedule came after it: 1,500 ticks of an every-2-s job, newer than
// nightly's, each attempt succeeded.
func TestInspectLostUnderAFrequentSchedule(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	open := historytest.OpenPostgres(t)
	h := historytest.Make(t, open)
	_, err := open().ExecContext(t.Context(), `INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at)
SELECT 'default', 'every-2s', now() - i * interval '2 seconds', i, 1, 'n1', 'succeeded', now() - i * interval '2 seconds', now() - i * interval '2 seconds'
FROM generate_series(1, 1500) AS i`)
	require.NoError(t, err)

	code, stdout, stderr := run(t, "inspect", "--postgres-url", url, "lost")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `\n  default\s+nightly\s+\S+\s+holder\s+`+fmt.Sprint(h.Holder.Token)+`\s+1\s+refused\s+`, stdout)
	require.NotContains(t, stdout, "every-2s")
}

// A database without the history's tables (its schedulers predate them,
// or it keeps no schedule) skips missed and lost, and gets no table.
func TestInspectHistoryMissing(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = schedule.NewStore(t.Context(), db, nil)
	require.NoError(t, err)
	_, err = db.Exec(`DROP TABLE aegis_schedule_run_attempt, aegis_schedule_run_missed`)
	require.NoError(t, err)
	code, stdout, stderr := run(t, "inspect", "--postgres-url", url, "stuck", "missed", "lost")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "missed — missed ticks")
	require.Contains(t, stdout, "  (skipped: no table aegis_schedule_run_missed here)")
	require.Contains(t, stdout, "  (skipped: no table aegis_schedule_run_attempt here)")
	require.Regexp(t, `stuck — .*\n  \(none\)`, stdout, "the run table is there")
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'aegis_schedule_run_%'`).Scan(&n))
	require.Zero(t, n, "inspect created no table")
}

func TestInspectHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, "help", "inspect")
	require.Equal(t, 0, code)
	golden(t, "help-inspect.golden", stdout)
}
