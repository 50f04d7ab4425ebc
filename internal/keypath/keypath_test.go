package keypath_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/keypath"
)

func TestSegment(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ key, segment string }{
		{"invoice-export", "invoice-export"},
		{"invoice-export/2026-10", "invoice-export%2F2026-10"},
		{"a.b_c", "a.b_c"},
		{".", "%2E"},
		{"..", "%2E."},
		{".hidden", "%2Ehidden"},
		{"100%", "100%25"},
		{"é", "%C3%A9"},
		{"a b\tc", "a%20b%09c"},
		{"/", "%2F"},
	} {
		require.Equal(t, tt.segment, keypath.Segment(tt.key), "key %q", tt.key)
		back, err := keypath.Key(tt.segment)
		require.NoError(t, err)
		require.Equal(t, tt.key, back)
	}
}

func TestKeyRejectsWhatSegmentNeverReturns(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"a/b", "%", "%2", "%zz", "%2f", "%61", ".", "..", "a b", "é"} {
		_, err := keypath.Key(bad)
		require.Error(t, err, "segment %q", bad)
	}
}

func FuzzSegment(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", ".", "..", "%", "é/€", "\x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		seg := keypath.Segment(key)
		require.NotContains(t, seg, "/")
		require.LessOrEqual(t, len(seg), 3*len(key))
		if key != "" {
			require.NotEqual(t, ".", seg)
			require.NotEqual(t, "..", seg)
		}
		for _, c := range []byte(seg) {
			require.True(t, strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.%", c) >= 0, "byte %q in %q", c, seg)
		}
		back, err := keypath.Key(seg)
		require.NoError(t, err)
		require.Equal(t, key, back)
	})
}
