package errtext

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func storable(t testing.TB, s string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "not valid UTF-8: %q", s)
	require.NotContains(t, s, "\x00")
	require.LessOrEqual(t, len(s), MaxLen)
}

func TestClean(t *testing.T) {
	long := strings.Repeat("é", 5000) + "the cause"
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "do not retry: boom", "do not retry: boom"},
		{"empty", "", ""},
		{"nul", "do not retry: \x00!", `do not retry: \x00!`},
		{"invalid UTF-8", "bad \xff\xfe byte", "bad \uFFFD byte"},
		{"exactly MaxLen", strings.Repeat("a", MaxLen), strings.Repeat("a", MaxLen)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Clean(tc.in))
		})
	}
	t.Run("long", func(t *testing.T) {
		got := Clean(long)
		storable(t, got)
		require.True(t, strings.HasPrefix(got, "éé"), "keeps the head")
		require.True(t, strings.HasSuffix(got, "the cause"), "keeps the tail")
		require.Contains(t, got, "bytes cut]")
		var cut int
		_, err := fmt.Sscanf(got[strings.Index(got, "[")+1:], "%d bytes cut", &cut)
		require.NoError(t, err)
		require.Equal(t, len(long), len(got)-len(marker(cut))+cut, "the marker counts the bytes cut")
	})
	t.Run("5 MB", func(t *testing.T) {
		got := Clean(strings.Repeat("x\x00\xff", 5<<20/3))
		storable(t, got)
	})
}

func TestOf(t *testing.T) {
	require.Equal(t, "", Of(nil))
	require.Equal(t, `a\x00b`, Of(errors.New("a\x00b")))
}

func TestASCII(t *testing.T) {
	got := ASCII("caf\xc3\xa9 \x00"+strings.Repeat("z", 3*MaxLen), errors.New("ERROR: invalid byte \x00 (SQLSTATE 22021)"))
	storable(t, got)
	for _, r := range got {
		require.Less(t, r, rune(utf8.RuneSelf), "only ASCII: %q", got)
	}
	require.True(t, strings.HasPrefix(got, "the error text was refused by the store (ERROR: invalid byte \\x00 (SQLSTATE 22021)); as ASCII: \"caf\\u00e9 \\x00zzz"), got)
	require.True(t, strings.HasSuffix(got, " ..."), got)
}

func TestPanic(t *testing.T) {
	var text string
	func() {
		defer func() {
			if v := recover(); v != nil {
				text = Panic(v, debug.Stack())
			}
		}()
		boom()
	}()
	storable(t, text)
	lines := strings.Split(text, "\n")
	require.Equal(t, "panicked: boom \\x00", lines[0])
	require.Contains(t, lines[1], "errtext.boom", "the first frame is the one that panicked:\n%s", text)
	require.LessOrEqual(t, len(lines), 1+2*5, "the first frames only:\n%s", text)
}

func boom() { panic("boom \x00") }

// FuzzClean: whatever the text, Clean's is storable, Clean is idempotent,
// and a text that was storable is unchanged.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x00b", "\xff", strings.Repeat("é", 3000), strings.Repeat("\xe2\x82", 3000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Clean(s)
		storable(t, got)
		require.Equal(t, got, Clean(got))
		if len(s) <= MaxLen && utf8.ValidString(s) && !strings.Contains(s, "\x00") {
			require.Equal(t, s, got)
		}
		a := ASCII(s, errors.New(s))
		storable(t, a)
	})
}
