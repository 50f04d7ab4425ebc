package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzScheduleFile parses fuzzed files of `aegis schedule apply`: a file
// is refused with an error, or it has at least one schedule, each named
// once, each one the catalog takes (Entry.Validate), with JSON args.
// Nothing panics.
func FuzzScheduleFile(f *testing.F) {
	for _, s := range []string{
		applyFileV1,
		applyFileV2,
		"",
		"schedules: []\n",
		`{"schedules": [{"name": "a", "every": "1s", "handler": "h", "args": {"b": [1, 2.5, null, true]}}]}`,
		"schedules:\n  - name: a\n    every: 1s\n    handler: h\n  - name: a\n    every: 1s\n    handler: h\n",
		"schedules:\n  - name: a\n    cron: 0 61 * * * *\n    handler: h\n",
		"schedules:\n  - name: a\n    every: 1s\n    handler: h\n    args: {x: &v 1, y: *v}\n",
		"schedules:\n  - name: a\n    every: 1s\n    handler: h\n    args: {1: .nan, ? [a]: b}\n",
		"schedules:\n  - name: a\n    every: 1s\n    handler: h\n    args: 2001-12-14t21:59:43.10-05:00\n",
		"schedules:\n  - name: \"\\0\"\n    every: 1500us\n    handler: h\n    deadline: 500us\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := parseScheduleFile(data)
		if err != nil {
			require.Nil(t, es)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotEmpty(t, es)
		names := map[string]bool{}
		for _, e := range es {
			require.False(t, names[e.Name], "name %q twice", e.Name)
			names[e.Name] = true
			require.NoError(t, e.Validate())
			if len(e.Args) > 0 {
				require.True(t, json.Valid(e.Args), "args %q", e.Args)
			}
		}
	})
}
