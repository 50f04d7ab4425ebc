package main

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var (
	// listStart opens a list of a component's migrations (internal/migrate).
	listStart = regexp.MustCompile(`migrate\.Migration\{`)
	// version is one migration of such a list.
	version = regexp.MustCompile(`\{Version: (\d+), SQL:`)
	// migrationRow is a row of CHANGELOG.md's table of migrations:
	// | component | database | `file` | versions (N or N–M) | release (or Unreleased) | tables |
	migrationRow = regexp.MustCompile("^\\| `[^`]+` \\| [^|]+ \\| `([^`]+\\.go)` \\| (\\d+)(?:–(\\d+))? \\| (v\\d+\\.\\d+\\.\\d+|Unreleased) \\|")
	// release is a release's heading in CHANGELOG.md, or the heading of
	// what the next release will ship (## Unreleased).
	release = regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+|Unreleased)(?: |$)`)
)

// shipped reports whether a directory (relative to the module) holds code
// the library ships, internal mechanics included: not the rig, the
// examples or the program (docs/architecture.md's parts).
func shipped(rel string) bool {
	for _, p := range []string{"internal/testing", "examples", "cmd"} {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return false
		}
	}
	return true
}

// migrationLists reads the library's migrations from its sources: file
// (relative to root, with slashes) to its lists of migrations in source
// order, each the versions it has in order.
func migrationLists(root string) (map[string][][]int, error) {
	lists := map[string][][]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || !shipped(rel) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own (bench/)
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		starts := listStart.FindAllStringIndex(src, -1)
		for i, s := range starts {
			end := len(src)
			if i+1 < len(starts) {
				end = starts[i+1][0]
			}
			var vs []int
			for _, m := range version.FindAllStringSubmatch(src[s[0]:end], -1) {
				v, _ := strconv.Atoi(m[1])
				vs = append(vs, v)
			}
			if len(vs) > 0 {
				lists[rel] = append(lists[rel], vs)
			}
		}
		return nil
	})
	return lists, err
}

// checkMigrations compares the migrations of the code with CHANGELOG.md's
// table: for each file, its rows in order cover its lists in order (a row
// starting at version 1 starts the next list), every version once, each
// row's release a release of the changelog. It returns one error naming
// every difference.
func checkMigrations(code map[string][][]int, changelog string) error {
	releases := map[string]bool{}
	for _, m := range release.FindAllStringSubmatch(changelog, -1) {
		releases[m[1]] = true
	}
	var problems []string
	table := map[string][][]int{}
	for line := range strings.SplitSeq(changelog, "\n") {
		m := migrationRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		file := m[1]
		from, _ := strconv.Atoi(m[2])
		to := from
		if m[3] != "" {
			to, _ = strconv.Atoi(m[3])
		}
		if !releases[m[4]] {
			problems = append(problems, fmt.Sprintf("the row of %s's versions %d–%d names %s, which has no section (## %s …)", file, from, to, m[4], m[4]))
		}
		if from == 1 || len(table[file]) == 0 {
			table[file] = append(table[file], nil)
		}
		last := len(table[file]) - 1
		for v := from; v <= to; v++ {
			table[file][last] = append(table[file][last], v)
		}
	}
	files := map[string]bool{}
	for f := range code {
		files[f] = true
	}
	for f := range table {
		files[f] = true
	}
	for _, f := range slices.Sorted(maps.Keys(files)) {
		have, want := code[f], table[f]
		for i := range max(len(have), len(want)) {
			var h, w []int
			if i < len(have) {
				h = have[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !slices.Equal(h, w) {
				problems = append(problems, fmt.Sprintf("%s's list %d of migrations has versions %s, the table %s", f, i+1, versions(h), versions(w)))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("CHANGELOG.md's table of migrations differs from the code:\n%s\nEach migration needs a row (component, database, file, versions, release, tables), in the file's order of lists", strings.Join(problems, "\n"))
}

// versions writes a list of versions for a message.
func versions(vs []int) string {
	if len(vs) == 0 {
		return "none"
	}
	var s []string
	for _, v := range vs {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ", ")
}
