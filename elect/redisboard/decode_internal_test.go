package redisboard

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

// FuzzDecodeRead: whatever the record's hash holds (written past the
// Board), decoding the read script's answer never panics, never returns a
// token below 1 or a negative time left, and reads back every record
// Publish writes.
func FuzzDecodeRead(f *testing.F) {
	f.Add("n1", "7", "1700000000000000", "1500")
	f.Add("", "0", "", "-1")
	f.Add("n", "-4", "x", "-2")
	f.Add("n", "9223372036854775808", "1", "1")
	f.Fuzz(func(t *testing.T, node, token, since, pttl string) {
		if l, left, err := decodeRead([]string{node, token, since, pttl}); err == nil {
			require.GreaterOrEqual(t, l.Token, aegis.Token(1))
			require.GreaterOrEqual(t, left, time.Duration(0))
			require.Equal(t, node, l.Node)
		}
		_, _, err := decodeRead([]string{node, token, since})
		require.Error(t, err, "three fields")
		tok := int64(len(token)) + 1
		l, left, err := decodeRead([]string{node, strconv.FormatInt(tok, 10), "1700000000000001", "250"})
		require.NoError(t, err)
		require.Equal(t, aegis.Token(tok), l.Token)
		require.Equal(t, 250*time.Millisecond, left)
		require.True(t, time.UnixMicro(1700000000000001).Equal(l.Since))
	})
}
