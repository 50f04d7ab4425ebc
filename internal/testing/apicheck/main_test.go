package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The library's exported API is the one on record in api/: a change of an
// exported name fails here, with the lines and the command to run.
func TestAPIOnRecord(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	require.NoError(t, err)
	require.NoError(t, Check(root))
}

// module writes a module of its own into a temporary directory: path to
// content.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	for name, content := range files {
		edit(t, dir, name, content)
	}
	return dir
}

func edit(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(name))
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// The check itself fails when a signature, a field, a constant's value or
// the set of packages changes without api/, naming each line, and passes
// after -write; renaming a parameter or changing unexported code is no
// change of the API.
func TestCheckFailsOnAChange(t *testing.T) {
	t.Setenv("GOWORK", "off")
	dir := module(t, map[string]string{
		"m.go":            "package m\n\nconst Limit = 10\n\ntype T struct {\n\tName string\n\thidden int\n}\n\nfunc (t *T) Get(key string) error { return nil }\n",
		"g/g.go":          "package g\n\nimport \"io\"\n\ntype R interface {\n\tio.Reader\n\tClose() error\n}\n\ntype Box[V any] struct{ V V }\n\nfunc (b Box[V]) Get() V { return b.V }\n\nfunc Map[V any](vs []V, f func(v V) V, opts ...string) (out []V) { return nil }\n",
		"p/p.go":          "package p\n\nimport \"context\"\n\nfunc F(ctx context.Context, n int) error { return nil }\n\nfunc g() {}\n",
		"internal/q/q.go": "package q\n\nfunc Q() {}\n",
		"cmd/c/main.go":   "package main\n\nfunc main() {}\n",
	})
	require.NoError(t, Write(dir))
	require.NoError(t, Check(dir))
	b, err := os.ReadFile(filepath.Join(dir, "api", "p.txt"))
	require.NoError(t, err)
	require.Equal(t, "pkg example.com/m/p, func F(context.Context, int) error\n", string(b))
	b, err = os.ReadFile(filepath.Join(dir, "api", "m.txt"))
	require.NoError(t, err)
	require.Equal(t, `pkg example.com/m, const Limit = 10
pkg example.com/m, const Limit ideal-int
pkg example.com/m, method (*T) Get(string) error
pkg example.com/m, type T struct
pkg example.com/m, type T struct, Name string
`, string(b))
	b, err = os.ReadFile(filepath.Join(dir, "api", "g.txt"))
	require.NoError(t, err)
	require.Equal(t, `pkg example.com/m/g, func Map[V any]([]V, func(V) V, ...string) []V
pkg example.com/m/g, method (Box[V]) Get() V
pkg example.com/m/g, type Box[V any] struct
pkg example.com/m/g, type Box[V any] struct, V V
pkg example.com/m/g, type R interface { Close, Read }
pkg example.com/m/g, type R interface, Close() error
pkg example.com/m/g, type R interface, Read([]byte) (int, error)
`, string(b))
	entries, err := os.ReadDir(filepath.Join(dir, "api"))
	require.NoError(t, err)
	require.Len(t, entries, 3, "internal/ and cmd/ have no file")

	edit(t, dir, "p/p.go", "package p\n\nimport \"context\"\n\nfunc F(c context.Context, count int) error { return nil }\n\nfunc g(int) {}\n")
	require.NoError(t, Check(dir), "a renamed parameter or an unexported change is no change of the API")

	edit(t, dir, "p/p.go", "package p\n\nimport \"context\"\n\nfunc F(ctx context.Context, n int64) error { return nil }\n")
	edit(t, dir, "m.go", "package m\n\nconst Limit = 20\n\ntype T struct {\n\tName string\n\tAge  int\n}\n\nfunc (t *T) Get(key string) error { return nil }\n")
	edit(t, dir, "r/r.go", "package r\n\nvar V int\n")
	err = Check(dir)
	require.Error(t, err)
	for _, want := range []string{
		"api/p.txt: -pkg example.com/m/p, func F(context.Context, int) error\n",
		"api/p.txt: +pkg example.com/m/p, func F(context.Context, int64) error\n",
		"api/m.txt: -pkg example.com/m, const Limit = 10\n",
		"api/m.txt: +pkg example.com/m, const Limit = 20\n",
		"api/m.txt: +pkg example.com/m, type T struct, Age int\n",
		"api/r.txt: missing (a new package of the library)\n",
		"api/r.txt: +pkg example.com/m/r, var V int\n",
		"run make api (go run ./internal/testing/apicheck -write)",
	} {
		require.Contains(t, err.Error(), want)
	}

	require.NoError(t, Write(dir))
	require.NoError(t, Check(dir))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "r")))
	err = Check(dir)
	require.ErrorContains(t, err, "api/r.txt: no such package of the library any more")
}

// Every migration of the library has its release in CHANGELOG.md's table.
func TestMigrationsOnRecord(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	require.NoError(t, err)
	code, err := migrationLists(root)
	require.NoError(t, err)
	require.Contains(t, code, "fence/fence.go")
	require.Len(t, code["schedule/sql.go"], 2, "the run table's PostgreSQL and SQLite lists")
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	require.NoError(t, checkMigrations(code, string(b)))
}

// The migrations' check fails on a migration without a row, a row without
// a migration and a release without a section.
func TestCheckMigrationsFailsOnAChange(t *testing.T) {
	t.Parallel()
	const changelog = "## v0.1.0 — 2026-12-07\n\n" +
		"| `c` | PostgreSQL | `a/sql.go` | 1–3 | v0.1.0 | t |\n" +
		"| `c` | SQLite | `a/sql.go` | 1–2 | v0.1.0 | t |\n" +
		"| `c` | SQLite | `a/sql.go` | 3 | v0.2.0 | t |\n" +
		"| `d` | SQLite | `b/b.go` | 1 | v0.1.0 | t |\n"
	err := checkMigrations(map[string][][]int{"a/sql.go": {{1, 2, 3}, {1, 2, 3}}, "b/b.go": {{1}}}, changelog)
	require.ErrorContains(t, err, "the row of a/sql.go's versions 3–3 names v0.2.0, which has no section")
	require.NoError(t, checkMigrations(map[string][][]int{"a/sql.go": {{1, 2, 3}, {1, 2, 3}}, "b/b.go": {{1}}},
		changelog+"## v0.2.0 — 2026-12-08\n"))
	// A migration not released yet is on a row of its own under
	// ## Unreleased.
	unreleased := "## Unreleased\n\n" + changelog + "## v0.2.0 — 2026-12-08\n" + "| `d` | SQLite | `b/b.go` | 2 | Unreleased | t |\n"
	require.NoError(t, checkMigrations(map[string][][]int{"a/sql.go": {{1, 2, 3}, {1, 2, 3}}, "b/b.go": {{1, 2}}}, unreleased))
	require.ErrorContains(t, checkMigrations(map[string][][]int{"a/sql.go": {{1, 2, 3}, {1, 2, 3}}, "b/b.go": {{1, 2}}},
		strings.TrimPrefix(unreleased, "## Unreleased\n\n")), "names Unreleased, which has no section")

	err = checkMigrations(map[string][][]int{"a/sql.go": {{1, 2, 3, 4}, {1, 2, 3}}, "c/c.go": {{1}}}, changelog)
	require.Error(t, err)
	for _, want := range []string{
		"a/sql.go's list 1 of migrations has versions 1, 2, 3, 4, the table 1, 2, 3",
		"b/b.go's list 1 of migrations has versions none, the table 1",
		"c/c.go's list 1 of migrations has versions 1, the table none",
	} {
		require.ErrorContains(t, err, want)
	}
}
