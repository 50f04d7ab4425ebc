package dashboard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseWatch: ?watch= of the page's stream is refused with a message
// naming the parameter, or it is at most maxWatch runs, each with an id
// and an event index of 0 or more, that the page's own form of them
// (ID:FROM, comma-separated) reads back as.
func FuzzParseWatch(f *testing.F) {
	for _, s := range []string{"", "r1", "r1:0,r2:17", "r1:", ":3", "r1:-1", "r1:x", "r1:9223372036854775808", ",", "a:1:2", strings.Repeat("r,", maxWatch+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ws, err := parseWatch(v)
		if err != nil {
			require.Contains(t, err.Error(), "watch")
			return
		}
		require.LessOrEqual(t, len(ws), maxWatch)
		parts := make([]string, len(ws))
		for i, w := range ws {
			require.NotEmpty(t, w.id)
			require.GreaterOrEqual(t, w.from, 0)
			parts[i] = fmt.Sprintf("%s:%d", w.id, w.from)
		}
		again, err := parseWatch(strings.Join(parts, ","))
		require.NoError(t, err)
		require.Equal(t, ws, again)
	})
}
