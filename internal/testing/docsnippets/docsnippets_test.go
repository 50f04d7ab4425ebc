package docsnippets

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the module's root, two levels above this package.
const root = "../../.."

// block is one fenced block of a Markdown file.
type block struct {
	file       string // slash path from the root
	line       int    // of the opening fence, from 1
	end        int    // of the closing fence
	info       string // the info string: "go", "go signatures", "sh", ""
	body       []string
	unterminal bool // no closing fence
}

// isGo reports whether the block is Go a program runs; signatures
// listings are Go that declares, not code to run.
func (b block) isGo() bool {
	f := strings.Fields(b.info)
	return len(f) > 0 && f[0] == "go" && !slices.Contains(f[1:], "signatures")
}

var fence = regexp.MustCompile("^ {0,3}(```+|~~~+)(.*)$")

// blocks returns the fenced blocks of a Markdown text (CommonMark's rules
// for what opens and closes a fence, without lists' deeper indentation).
func blocks(file, text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := block{file: file, line: i + 1, info: strings.TrimSpace(m[2]), unterminal: true}
		for i++; i < len(lines); i++ {
			c := fence.FindStringSubmatch(lines[i])
			if c != nil && c[1][0] == m[1][0] && len(c[1]) >= len(m[1]) && strings.TrimSpace(c[2]) == "" {
				b.end, b.unterminal = i+1, false
				break
			}
			b.body = append(b.body, lines[i])
		}
		out = append(out, b)
	}
	return out
}

// normalize drops blank lines and reduces each line to its words, so that
// indentation and gofmt's alignment of comments do not count.
func normalize(lines []string) []string {
	var out []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// match returns how many leading lines of snippet the best-aligned
// contiguous run of file matches; len(snippet) means it is there.
func match(snippet, file []string) int {
	best := 0
	for i := range file {
		n := 0
		for n < len(snippet) && i+n < len(file) && file[i+n] == snippet[n] {
			n++
		}
		best = max(best, n)
		if best == len(snippet) {
			break
		}
	}
	return best
}

// exampleFiles returns every example_test.go and example_*_test.go of the
// module, by slash path, normalized.
func exampleFiles(t *testing.T) map[string][]string {
	t.Helper()
	files := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		n := d.Name()
		if n != "example_test.go" && !(strings.HasPrefix(n, "example_") && strings.HasSuffix(n, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = normalize(strings.Split(string(b), "\n"))
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// docs returns README.md and docs/*.md, by slash path.
func docs(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	names = append(names, filepath.Join(root, "README.md"))
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, n)
		require.NoError(t, err)
		out[filepath.ToSlash(rel)] = string(b)
	}
	require.Contains(t, out, "README.md")
	return out
}

// mentionWindow is how many lines before a block's opening fence or after
// its closing one the text must name the example file that runs it.
const mentionWindow = 12

// TestSnippetsAreExamples: every ```go block of README.md and docs/*.md is,
// modulo whitespace, a run of lines of an example_*_test.go file, and the
// text around it names that file. A block without an info string fails:
// it could be Go that nothing checks.
func TestSnippetsAreExamples(t *testing.T) {
	examples := exampleFiles(t)
	checked := 0
	for name, text := range docs(t) {
		lines := strings.Split(text, "\n")
		for _, b := range blocks(name, text) {
			at := fmt.Sprintf("%s:%d", name, b.line)
			if b.unterminal {
				t.Errorf("%s: the fence is never closed", at)
				continue
			}
			if b.info == "" {
				t.Errorf("%s: a fenced block without an info string: label it (```go, ```go signatures, ```sh, ```text, ...)", at)
				continue
			}
			if !b.isGo() {
				continue
			}
			checked++
			snippet := normalize(b.body)
			if len(snippet) == 0 {
				t.Errorf("%s: an empty ```go block", at)
				continue
			}
			var in []string
			bestFile, best := "", -1
			for file, code := range examples {
				n := match(snippet, code)
				if n == len(snippet) {
					in = append(in, file)
				}
				if n > best {
					bestFile, best = file, n
				}
			}
			if len(in) == 0 && best == 0 {
				t.Errorf("%s: this ```go block is in no example_*_test.go file: no example has its first line %q", at, snippet[0])
				continue
			}
			if len(in) == 0 {
				t.Errorf("%s: this ```go block is in no example_*_test.go file; closest: %s, which differs at the snippet's line %q",
					at, bestFile, snippet[best])
				continue
			}
			around := strings.Join(lines[max(0, b.line-1-mentionWindow):min(len(lines), b.end+mentionWindow)], "\n")
			if !slices.ContainsFunc(in, func(f string) bool { return strings.Contains(around, f) }) {
				t.Errorf("%s: say which example runs this block: name %s within %d lines of it", at, strings.Join(in, " or "), mentionWindow)
			}
		}
	}
	require.Positive(t, checked, "no ```go block was checked: the test proves nothing")
}

func TestBlocks(t *testing.T) {
	t.Parallel()
	md := "text\n" +
		"```go\nx := 1\n\n    y := 2\n```\n" +
		"```go signatures\nfunc F() error\n```\n" +
		"```sh\nmake test\n```\n" +
		"```\nunlabelled\n```\n" +
		"  ````go\na\n```\nb\n````\n" +
		"```go\nnever closed\n"
	got := blocks("x.md", md)
	require.Len(t, got, 6)
	for i, want := range []struct {
		line   int
		info   string
		isGo   bool
		body   []string
		closed bool
	}{
		{2, "go", true, []string{"x := 1", "y := 2"}, true},
		{7, "go signatures", false, []string{"func F() error"}, true},
		{10, "sh", false, []string{"make test"}, true},
		{13, "", false, []string{"unlabelled"}, true},
		{16, "go", true, []string{"a", "```", "b"}, true}, // a shorter fence does not close a longer one
		{21, "go", true, []string{"never closed"}, false},
	} {
		b := got[i]
		require.Equal(t, want.line, b.line, i)
		require.Equal(t, want.info, b.info, i)
		require.Equal(t, want.isGo, b.isGo(), i)
		require.Equal(t, want.body, normalize(b.body), i)
		require.Equal(t, want.closed, !b.unterminal, i)
	}
}

// TestMatchCatchesDrift: a snippet matches its example modulo whitespace
// only, so a changed word, a line dropped or lines reordered is a miss.
func TestMatchCatchesDrift(t *testing.T) {
	t.Parallel()
	code := normalize(strings.Split("func f() error {\n\tif err := a(); err != nil { // why\n\t\treturn err\n\t}\n\treturn b()\n}", "\n"))
	for _, tc := range []struct {
		name    string
		snippet string
		found   bool
	}{
		{"same, other indentation", "if err := a(); err != nil {   // why\n    return err\n}\n\nreturn b()", true},
		{"a word changed", "if err := a(); err != nil { // why\n\treturn nil\n}", false},
		{"a line dropped", "if err := a(); err != nil { // why\n}\nreturn b()", false},
		{"lines reordered", "return b()\nif err := a(); err != nil { // why", false},
		{"a comment changed", "if err := a(); err != nil { // because", false},
	} {
		s := normalize(strings.Split(tc.snippet, "\n"))
		require.Equal(t, tc.found, match(s, code) == len(s), tc.name)
	}
}
