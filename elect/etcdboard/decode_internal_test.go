package etcdboard

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
)

// FuzzDecodeRecord: whatever value the record's key holds (written past
// the Board, or by another version), decoding never panics, never returns
// a leader with a token below 1, and reads back every record Publish
// writes.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range []string{`{"node":"n1","token":7,"since_us":1700000000000000}`, `{}`, `{"token":0}`, `{"token":-3}`,
		`{"token":"7"}`, `null`, `[]`, `{"node":"\u0000","token":9223372036854775807}`, ``, `{`} {
		f.Add([]byte(s), "n", int64(1), int64(0))
	}
	f.Fuzz(func(t *testing.T, v []byte, node string, token, since int64) {
		if l, err := decodeRecord(v); err == nil {
			require.GreaterOrEqual(t, l.Token, aegis.Token(1), "%q", v)
		}
		if token < 1 {
			return
		}
		want := elect.Leader{Node: node, Token: aegis.Token(token), Since: time.UnixMicro(since)}
		b, err := json.Marshal(record{Node: want.Node, Token: int64(want.Token), SinceUS: want.Since.UnixMicro()})
		require.NoError(t, err)
		got, err := decodeRecord(b)
		require.NoError(t, err)
		require.Equal(t, want.Token, got.Token)
		require.True(t, want.Since.Equal(got.Since))
		// encoding/json writes each byte of invalid UTF-8 as U+FFFD, as
		// a conversion to runes does.
		require.Equal(t, string([]rune(node)), got.Node)
	})
}
