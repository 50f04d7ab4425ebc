package cli

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// hostile are names with terminal escape sequences: clear the screen, set
// the window title, a bell, a carriage return over the line.
const (
	hostileName    = "a\x1b[2Jb"
	hostileHandler = "h\x1b]0;pwned\x07"
	hostileNode    = "n\rfake"
)

// requireNoControl fails when out has a control character other than the
// newlines that end its lines.
func requireNoControl(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range strings.ReplaceAll(out, "\n", "") {
		require.False(t, r < 0x20 || r == 0x7f, "%s prints control character %U raw: %q", what, r, out)
	}
}

// Text output prints a name with control characters quoted, as %q does;
// --json escapes it and stays valid JSON.
func TestScheduleEscapesNames(t *testing.T) {
	t.Parallel()
	eachScheduleStore(t, func(t *testing.T, s scheduleStore) {
		quoted := `"a\x1b[2Jb"`
		out := s.ok(t, "put", hostileName, "--every", "1m", "--handler", hostileHandler)
		requireNoControl(t, "put", out)
		require.Contains(t, out, quoted)
		require.Contains(t, out, `"h\x1b]0;pwned\a"`)
		out = s.ok(t, "list")
		requireNoControl(t, "list", out)
		require.Contains(t, out, quoted)
		ls := s.list(t)
		require.Len(t, ls, 1)
		require.Equal(t, hostileName, ls[0].Name, "--json has the name as it is")
		require.Equal(t, hostileHandler, ls[0].Handler)
		for _, sub := range []string{"pause", "resume", "run-now", "runs", "rm"} {
			out := s.ok(t, sub, hostileName)
			requireNoControl(t, sub, out)
			require.Contains(t, out, quoted, sub)
		}
	})
}

// Runs, missed ticks and inspect's tables print what the store holds
// quoted when it has control characters.
func TestRunsAndInspectEscape(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	s := scheduleStore{name: "postgres", store: url}
	s.ok(t, "put", hostileName, "--every", "1m", "--handler", "h")
	s.ok(t, "runs", hostileName) // creates the run tables
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, error)
		VALUES ('default', $1, now() - interval '1 minute', 7, 1, $2, 'failed', now() - interval '1 minute', now(), $3)`, hostileName, hostileNode, "boom\x1b[31m")
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO aegis_schedule_run_missed (namespace, job, fire_at, cause, detail, node, recorded_at)
		VALUES ('default', $1, now() - interval '2 minutes', 'unbound', $2, $3, now())`, hostileName, "no\x1b[2J handler", hostileNode)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO aegis_schedule_run (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at)
		VALUES ('default', $1, now() - interval '1 hour', 9, $2, 1, 'running', now() - interval '1 hour', now() - interval '50 minutes')`, hostileName, hostileNode)
	require.NoError(t, err)

	out := s.ok(t, "runs", hostileName)
	requireNoControl(t, "runs", out)
	require.Contains(t, out, `"n\rfake"`)
	require.Contains(t, out, `"boom\x1b[31m"`)
	require.Contains(t, out, `"no\x1b[2J handler"`)

	code, out, stderr := run(t, "inspect", "--postgres-url", url, "stuck", "missed", "lost")
	require.Equal(t, 0, code, stderr)
	requireNoControl(t, "inspect", out)
	require.Contains(t, out, `"a\x1b[2Jb"`)
	require.Contains(t, out, `"n\rfake"`)
}
