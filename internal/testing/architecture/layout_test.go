package architecture

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mapRow is a row of the README's map of the repository:
// | `path`[, `path`…] | part | what it is |.
var mapRow = regexp.MustCompile("^\\| (`[^`]+`(?:, `[^`]+`)*) \\| ([^|]+) \\| [^|]+ \\|$")

// The README's map (## Layout) matches the tree: every path it names
// exists, every folder at the top of the repository has a row, and every
// package of the module is under a row (its longest) of the package's part.
func TestLayoutMap(t *testing.T) {
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := bytes.Cut(readme, []byte("\n## Layout\n"))
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if end := bytes.Index(layout, []byte("\n## ")); end >= 0 {
		layout = layout[:end]
	}
	rows := map[string]string{} // path to part
	sc := bufio.NewScanner(bytes.NewReader(layout))
	for sc.Scan() {
		m := mapRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, cell := range strings.Split(m[1], ", ") {
			path := strings.Trim(cell, "`")
			if _, dup := rows[path]; dup {
				t.Errorf("README.md's map names %s twice", path)
			}
			rows[path] = strings.TrimSpace(m[2])
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path))); err != nil {
				t.Errorf("README.md's map names %s, which is not in the tree: %v", path, err)
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("README.md's ## Layout has no table")
	}
	// row finds the longest row a package (relative to the root) is under;
	// the row "." holds the root package alone.
	row := func(name string) (string, bool) {
		best, found := "", false
		for p := range rows {
			if (name == p || (p != "." && strings.HasPrefix(name, p+"/"))) && len(p) >= len(best) {
				best, found = p, true
			}
		}
		return best, found
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "bin" { // bin: the tools make installs, ignored by git
			continue
		}
		named := false
		for p := range rows {
			named = named || p == e.Name() || strings.HasPrefix(p, e.Name()+"/")
		}
		if !named {
			t.Errorf("README.md's map has no row for the folder %s/", e.Name())
		}
	}
	for _, p := range packages(t, root) {
		name, _ := rel(p.ImportPath)
		r, ok := row(name)
		if !ok {
			t.Errorf("package %s is under no row of README.md's map", name)
			continue
		}
		if rows[r] != part(name) {
			t.Errorf("README.md's map puts %s (under %s) in the part %q; it is in the %s", name, r, rows[r], part(name))
		}
	}
}
