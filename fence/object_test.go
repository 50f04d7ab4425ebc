package fence_test

import (
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
)

func TestTokenKey(t *testing.T) {
	t.Parallel()
	k, err := fence.TokenKey("exports/2026-10", 7, "pdf")
	require.NoError(t, err)
	require.Equal(t, "exports/2026-10/0000000000000000007.pdf", k)
	tok, ok := fence.KeyToken(k)
	require.True(t, ok)
	require.Equal(t, aegis.Token(7), tok)
	require.Less(t, tokenKey(t, "p", 9, ""), tokenKey(t, "p", 10, ""), "lexical order is token order")
	for _, bad := range []string{"p/7.pdf", "p/abc", "p/-000000000000000001", "p/0000000000000000000.pdf", ""} {
		_, ok := fence.KeyToken(bad)
		require.False(t, ok, bad)
	}
}

// tokenKey is fence.TokenKey for arguments the test knows are valid.
func tokenKey(t *testing.T, prefix string, token aegis.Token, ext string) string {
	t.Helper()
	k, err := fence.TokenKey(prefix, token, ext)
	require.NoError(t, err)
	return k
}

// TestTokenKeyInvalid: a key is refused when no grant could have made it,
// or when it would not round-trip through KeyToken.
func TestTokenKeyInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prefix string
		token        aegis.Token
		ext, want    string
	}{
		{"token zero", "p", 0, "pdf", "token 0 is not positive"},
		{"negative token", "p", -3, "pdf", "token -3 is not positive"},
		{"NUL in prefix", "p\x00q", 1, "pdf", "prefix \"p\\x00q\" contains NUL"},
		{"prefix not UTF-8", "p\xff", 1, "pdf", "prefix \"p\\xff\" is not valid UTF-8"},
		{"prefix too long", strings.Repeat("p", fence.MaxResource+1), 1, "", "prefix is 1025 bytes, more than 1024"},
		{"slash in extension", "p", 1, "tar/gz", `extension "tar/gz" contains '/'`},
		{"NUL in extension", "p", 1, "p\x00", "extension \"p\\x00\" contains NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := fence.TokenKey(tc.prefix, tc.token, tc.ext)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, k)
		})
	}
}

func FuzzKeyToken(f *testing.F) {
	f.Add(int64(1), "pdf")
	f.Add(int64(1<<62), "")
	f.Fuzz(func(t *testing.T, n int64, ext string) {
		k, err := fence.TokenKey("a/b", aegis.Token(n), ext)
		if err != nil {
			if !errors.Is(err, aegis.ErrInvalid) {
				t.Fatalf("TokenKey(%d, %q): %v does not wrap ErrInvalid", n, ext, err)
			}
			return
		}
		if strings.Contains(strings.TrimPrefix(ext, "."), ".") {
			return // KeyToken cuts at the first dot: still the token
		}
		got, ok := fence.KeyToken(k)
		if !ok || got != aegis.Token(n) {
			t.Fatalf("round trip of %d, %q: %d, %v", n, ext, got, ok)
		}
	})
}

func TestDir(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d, err := fence.NewDir(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, d.Put(ctx, "a/b/1.txt", strings.NewReader("one")))
	require.NoError(t, d.Put(ctx, "a/b/1.txt", strings.NewReader("uno")))
	require.NoError(t, d.Put(ctx, "a/2.txt", strings.NewReader("two")))
	r, err := d.Open(ctx, "a/b/1.txt")
	require.NoError(t, err)
	b, _ := io.ReadAll(r)
	r.Close()
	require.Equal(t, "uno", string(b))
	keys, err := d.List(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"a/2.txt", "a/b/1.txt"}, keys)
	keys, err = d.List(ctx, "missing")
	require.NoError(t, err)
	require.Empty(t, keys)
	require.NoError(t, d.Delete(ctx, "a/2.txt"))
	require.NoError(t, d.Delete(ctx, "a/2.txt"), "deleting a missing object is not an error")
	_, err = d.Open(ctx, "a/2.txt")
	require.ErrorIs(t, err, fs.ErrNotExist)
	for _, bad := range []string{"", "../escape", "/abs", "a/../../b", "a\x00b", "a\xffb", strings.Repeat("k", fence.MaxResource+1)} {
		require.ErrorIs(t, d.Put(ctx, bad, strings.NewReader("x")), aegis.ErrInvalid, bad)
		_, err := d.Open(ctx, bad)
		require.ErrorIs(t, err, aegis.ErrInvalid, bad)
		require.ErrorIs(t, d.Delete(ctx, bad), aegis.ErrInvalid, bad)
	}
	_, err = fence.NewDir("")
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d, err := fence.NewDir(t.TempDir())
	require.NoError(t, err)
	for _, tok := range []aegis.Token{3, 4, 5, 6} {
		require.NoError(t, d.Put(ctx, tokenKey(t, "x", tok, "pdf"), strings.NewReader("v")))
	}
	require.NoError(t, d.Put(ctx, "x/readme.txt", strings.NewReader("not a token key")))
	canonical := tokenKey(t, "x", 4, "pdf")
	deleted, err := fence.Sweep(ctx, d, "x", 5, func(k string) bool { return k == canonical })
	require.NoError(t, err)
	require.Equal(t, []string{tokenKey(t, "x", 3, "pdf")}, deleted)
	keys, err := d.List(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, []string{canonical, tokenKey(t, "x", 5, "pdf"), tokenKey(t, "x", 6, "pdf"), "x/readme.txt"}, keys,
		"the referenced object, the current holder's and a newer holder's uploads stay")

	none := func(string) bool { return false }
	for _, tc := range []struct {
		name    string
		store   fence.ObjectStore
		prefix  string
		current aegis.Token
		ref     func(string) bool
		want    string
	}{
		{"nil store", nil, "x", 5, none, "store is nil"},
		{"nil referenced", d, "x", 5, nil, "referenced is nil"},
		{"token zero", d, "x", 0, none, "token 0 is not positive"},
		{"negative token", d, "x", -1, none, "token -1 is not positive"},
		{"NUL in prefix", d, "x\x00", 5, none, "contains NUL"},
	} {
		_, err := fence.Sweep(ctx, tc.store, tc.prefix, tc.current, tc.ref)
		require.ErrorIs(t, err, aegis.ErrInvalid, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	keys, err = d.List(ctx, "x")
	require.NoError(t, err)
	require.Len(t, keys, 4, "a refused sweep deletes nothing")
}
