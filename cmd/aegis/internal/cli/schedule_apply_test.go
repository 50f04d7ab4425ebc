package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// versions is each listed schedule's version, by name.
func (s scheduleStore) versions(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, l := range s.list(t) {
		out[l.Name] = l.Version
	}
	return out
}

// writeFile writes text to a file of t's and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

const applyFileV1 = `# the billing service's schedules
schedules:
  - name: nightly
    cron: "0 30 2 * * *"
    tz: Europe/Berlin
    handler: invoice-export
    args: {month: "2026-10", regions: [eu, us]}
  - name: tick
    every: 1m
    handler: echo
    max-attempts: 5
`

const applyFileV2 = `schedules:
  - name: nightly
    cron: "0 30 2 * * *"
    tz: Europe/Berlin
    handler: invoice-export
    args: {"month": "2026-10", "regions": ["eu", "us"]}
  - name: tick
    every: 2m
    handler: echo
    args: {n: 2}
    max-attempts: 5
  - name: weekly
    cron: "@weekly"
    handler: report
`

// apply, edit the file, apply --dry-run (the diff, nothing changed),
// apply: the catalog matches the file, and a schedule that did not
// change keeps its version.
func TestScheduleApplyRoundTrip(t *testing.T) {
	t.Parallel()
	eachScheduleStore(t, func(t *testing.T, s scheduleStore) {
		s.ok(t, "put", "legacy", "--every", "1h", "--handler", "old")
		v1 := writeFile(t, "schedules.yaml", applyFileV1)
		require.Equal(t, `nightly: created: 0 30 2 * * * (Europe/Berlin), handler invoice-export
tick: created: @every 1m0s, handler echo
legacy: not in the file, kept (--prune deletes it)
`, s.ok(t, "apply", "-f", v1))
		ls := s.list(t)
		require.Len(t, ls, 3)
		require.Equal(t, "nightly", ls[1].Name)
		var args bytes.Buffer
		require.NoError(t, json.Compact(&args, ls[1].Args))
		require.Equal(t, `{"month":"2026-10","regions":["eu","us"]}`, args.String(), "args as JSON, in the file's key order")
		require.Equal(t, 5, ls[2].MaxAttempts)
		before := s.versions(t)
		require.Equal(t, map[string]int64{"legacy": 1, "nightly": 2, "tick": 3}, before)

		require.Equal(t, `nightly: unchanged (version 2)
tick: unchanged (version 3)
legacy: not in the file, kept (--prune deletes it)
`, s.ok(t, "apply", "-f", v1), "a second apply changes nothing")
		require.Equal(t, before, s.versions(t))

		v2 := writeFile(t, "schedules.yaml", applyFileV2)
		diff := `nightly: unchanged (version 2)
tick: would be updated: spec "@every 1m0s" → "@every 2m0s"; args {} → {"n":2}
weekly: would be created: @weekly (UTC), handler report
legacy: would be deleted
dry run: nothing was changed
`
		require.Equal(t, diff, s.ok(t, "apply", "--dry-run", "--prune", "-f", v2))
		require.Equal(t, before, s.versions(t), "a dry run changes nothing")

		require.Equal(t, strings.NewReplacer("would be ", "", "dry run: nothing was changed\n", "").Replace(diff),
			s.ok(t, "apply", "-f", v2, "--prune"))
		after := s.versions(t)
		require.Equal(t, map[string]int64{"nightly": 2, "tick": 4, "weekly": 5}, after, "nightly kept its version; legacy deleted (version 6)")
		ls = s.list(t)
		require.Equal(t, "@every 2m0s", ls[1].Spec)
		require.JSONEq(t, `{"n":2}`, string(ls[1].Args))

		require.Equal(t, `nightly: unchanged (version 2)
tick: unchanged (version 4)
weekly: unchanged (version 5)
`, s.ok(t, "apply", "-f", v2, "--prune"))
		require.Equal(t, after, s.versions(t))
	})
}

// A bad file is refused as a usage error naming the schedule and the key,
// before the store is opened: nothing is applied, also of the schedules
// before the mistake.
func TestScheduleApplyBadFile(t *testing.T) {
	t.Parallel()
	good := "schedules:\n  - name: first\n    every: 1s\n    handler: h\n"
	for _, c := range []struct{ name, file, want string }{
		{"empty", "", "the file is empty"},
		{"comments only", "# nothing\n", "the file is empty"},
		{"no list", "schedules: []\n", "schedules is empty"},
		{"not a mapping", "- name: x\n", "want a mapping with the key schedules"},
		{"unknown top key", good + "namespace: x\n", `unknown key "namespace"`},
		{"unknown field", good + "  - name: second\n    every: 1s\n    handler: h\n    retries: 3\n", `schedules[1] (line 5) "second": unknown key "retries" (line 8)`},
		{"malformed cron", good + "  - name: second\n    cron: 0 61 * * * *\n    handler: h\n", `schedules[1] (line 5) "second": cron:`},
		{"both specs", good + "  - name: second\n    cron: '@daily'\n    every: 1s\n    handler: h\n", `"second": set one of cron and every, not both`},
		{"bad zone", good + "  - name: second\n    cron: '@daily'\n    tz: Mars/Base\n    handler: h\n", `"second": tz "Mars/Base"`},
		{"bad duration", good + "  - name: second\n    every: often\n    handler: h\n", `"second": every "often": want a duration`},
		{"bad policy", good + "  - name: second\n    every: 1s\n    handler: h\n    overlap: sometimes\n", `"second": overlap "sometimes"`},
		{"no handler", good + "  - name: second\n    every: 1s\n", `"second": handler is required`},
		{"no name", good + "  - every: 1s\n    handler: h\n", `schedules[1] (line 5): name is required`},
		{"duplicate name", good + "  - name: first\n    every: 2s\n    handler: h\n", `schedules[1] (line 5): name "first" is also the schedule at line 2`},
		{"duplicate key", "schedules:\n  - name: a\n    every: 1s\n    every: 2s\n    handler: h\n", `"a": key every twice (line 4)`},
		{"args alias", "schedules:\n  - name: a\n    every: 1s\n    handler: h\n    args: {x: &v 1, y: *v}\n", `"a": args (line 5): aliases`},
		{"two documents", good + "---\n" + good, "more than one YAML document"},
		{"not YAML", "schedules: [\n", "not YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := filepath.Join(t.TempDir(), "catalog.db")
			file := writeFile(t, "schedules.yaml", c.file)
			code, stdout, stderr := run(t, "schedule", "apply", "-f", file, "--store", store, "--prune")
			require.Equal(t, 2, code, "%s%s", stdout, stderr)
			require.Contains(t, stderr, c.want)
			require.Contains(t, stderr, file, "the error names the file")
			require.Empty(t, stdout)
			_, err := os.Stat(store)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing was applied: no SQLite file")
		})
	}
	code, _, stderr := run(t, "schedule", "apply", "--store", filepath.Join(t.TempDir(), "c.db"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "apply: give -f FILE")
}

// The example file of docs/schedule.md parses, and is the one it shows.
func TestScheduleApplyExampleFile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../../../examples/catalog/schedules.yaml")
	require.NoError(t, err)
	es, err := parseScheduleFile(data)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.JSONEq(t, `{"month":"2026-10"}`, string(es[0].Args))
	doc, err := os.ReadFile("../../../../docs/schedule.md")
	require.NoError(t, err)
	_, body, ok := strings.Cut(string(data), "schedules:\n")
	require.True(t, ok)
	require.Contains(t, string(doc), "```yaml\nschedules:\n"+body+"```\n", "docs/schedule.md shows examples/catalog/schedules.yaml")
}
