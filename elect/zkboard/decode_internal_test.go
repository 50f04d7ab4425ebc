package zkboard

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

func TestLatestRecord(t *testing.T) {
	for _, tt := range []struct {
		children []string
		want     aegis.Token
	}{
		{nil, 0},
		{[]string{"top"}, 0},
		{[]string{"leader-3", "leader-12", "top", "leader-7"}, 12},
		{[]string{"leader-+99", "leader-099", "leader--1", "leader-0", "leader-5"}, 5},
		{[]string{"leader-9223372036854775807", "leader-9223372036854775808"}, 9223372036854775807},
		{[]string{"leaders-8", "Leader-8", "leader-8x"}, 0},
	} {
		require.Equal(t, tt.want, latestRecord(tt.children), "%q", tt.children)
	}
}

// FuzzRecords: whatever the election node's children are called and
// whatever a record holds (written past the Board), reading them never
// panics; the token found is a child's, named as Publish names it, and
// no such child has a greater one; every record Publish writes reads back.
func FuzzRecords(f *testing.F) {
	f.Add("leader-3,leader-12,top", []byte(`{"node":"n1","since_us":1700000000000000}`), "n", int64(0))
	f.Add("leader-+7,leader-07,leader-", []byte(`{}`), "", int64(-1))
	f.Add("", []byte(`null`), "\xff", int64(1))
	f.Fuzz(func(t *testing.T, names string, raw []byte, node string, since int64) {
		children := strings.Split(names, ",")
		best := latestRecord(children)
		if best != 0 {
			require.Contains(t, children, recordName(best))
		}
		for _, c := range children {
			if n, err := strconv.ParseInt(strings.TrimPrefix(c, recordPrefix), 10, 64); err == nil && n > 0 && recordName(aegis.Token(n)) == c {
				require.LessOrEqual(t, aegis.Token(n), best, "record %q missed", c)
			}
		}
		if l, err := decodeData(raw, 7); err == nil {
			require.Equal(t, aegis.Token(7), l.Token)
		}
		b, err := json.Marshal(data{Node: node, SinceUS: since})
		require.NoError(t, err)
		l, err := decodeData(b, 9)
		require.NoError(t, err)
		require.Equal(t, string([]rune(node)), l.Node)
		require.True(t, time.UnixMicro(since).Equal(l.Since))
	})
}
