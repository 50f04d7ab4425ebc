package fence_test

import (
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
	k := fence.TokenKey("exports/2026-10", 7, "pdf")
	require.Equal(t, "exports/2026-10/0000000000000000007.pdf", k)
	tok, ok := fence.KeyToken(k)
	require.True(t, ok)
	require.Equal(t, aegis.Token(7), tok)
	require.Less(t, fence.TokenKey("p", 9, ""), fence.TokenKey("p", 10, ""), "lexical order is token order")
	for _, bad := range []string{"p/7.pdf", "p/abc", "p/-000000000000000001", ""} {
		_, ok := fence.KeyToken(bad)
		require.False(t, ok, bad)
	}
}

func FuzzKeyToken(f *testing.F) {
	f.Add(int64(0), "pdf")
	f.Add(int64(1<<62), "")
	f.Fuzz(func(t *testing.T, n int64, ext string) {
		if n < 0 || strings.ContainsAny(ext, "./") {
			return
		}
		got, ok := fence.KeyToken(fence.TokenKey("a/b", aegis.Token(n), ext))
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
	for _, bad := range []string{"", "../escape", "/abs", "a/../../b"} {
		require.ErrorContains(t, d.Put(ctx, bad, strings.NewReader("x")), "invalid object key", bad)
	}
	_, err = fence.NewDir("")
	require.Error(t, err)
}

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d, err := fence.NewDir(t.TempDir())
	require.NoError(t, err)
	for _, tok := range []aegis.Token{3, 4, 5, 6} {
		require.NoError(t, d.Put(ctx, fence.TokenKey("x", tok, "pdf"), strings.NewReader("v")))
	}
	require.NoError(t, d.Put(ctx, "x/readme.txt", strings.NewReader("not a token key")))
	canonical := fence.TokenKey("x", 4, "pdf")
	deleted, err := fence.Sweep(ctx, d, "x", 5, func(k string) bool { return k == canonical })
	require.NoError(t, err)
	require.Equal(t, []string{fence.TokenKey("x", 3, "pdf")}, deleted)
	keys, err := d.List(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, []string{canonical, fence.TokenKey("x", 5, "pdf"), fence.TokenKey("x", 6, "pdf"), "x/readme.txt"}, keys,
		"the referenced object, the current holder's and a newer holder's uploads stay")
}
