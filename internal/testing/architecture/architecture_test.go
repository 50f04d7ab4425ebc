package architecture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// row is a line of docs/architecture.md's table: `| layer | `package` | room |`.
var row = regexp.MustCompile("^\\| (\\d+) \\| `([^`]+)`[^|]* \\| [^|]+ \\|$")

// layers reads the table: package path (relative to the module, "." for
// the root) to layer.
func layers(t *testing.T, root string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		layer, _ := strconv.Atoi(m[1])
		if _, dup := out[m[2]]; dup {
			t.Errorf("docs/architecture.md lists %s twice", m[2])
		}
		out[m[2]] = layer
	}
	if len(out) == 0 {
		t.Fatal("docs/architecture.md has no table of layers")
	}
	return out
}

// pkg is what go list says of a package.
type pkg struct {
	ImportPath string
	Imports    []string
}

// module is the module's path.
const module = "github.com/aegislab/aegis"

// rel gives a package's path relative to the module ("." for the root),
// and false for a package outside it.
func rel(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	return strings.CutPrefix(path, module+"/")
}

// moduleRoot is the module's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// packages lists the module's packages and their imports (test files left
// out).
func packages(t *testing.T, root string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var list []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		list = append(list, p)
	}
	return list
}

// Every package of the module is in the table once, and imports only
// packages of lower layers; every package of the table exists.
func TestLayers(t *testing.T) {
	root := moduleRoot(t)
	want := layers(t, root)
	seen := map[string]bool{}
	usedBy := map[string][]string{}  // a mechanic of internal/ to the library's packages outside internal/ that import it
	imports := map[string][]string{} // a package to the packages that import it
	for _, p := range packages(t, root) {
		name, _ := rel(p.ImportPath)
		seen[name] = true
		for _, imp := range p.Imports {
			if dep, ok := rel(imp); ok {
				imports[dep] = append(imports[dep], name)
			}
		}
		layer, ok := want[name]
		if !ok {
			t.Errorf("package %s is not in docs/architecture.md: give it a layer and a line", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := rel(imp)
			if !ok {
				continue
			}
			if l, listed := want[dep]; listed && l >= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): an arrow that does not point down", name, layer, dep, l)
			}
			if from, to := part(name), part(dep); !allowed[from][to] {
				t.Errorf("%s, a package of the %s, imports %s, a package of the %s: docs/architecture.md's parts allow the %s only %s", name, from, dep, to, from, strings.Join(slices.Sorted(maps.Keys(allowed[from])), ", "))
			}
			if part(name) == examples && mechanic(dep) {
				t.Errorf("%s, an example, imports %s: an example imports only what a user's code can", name, dep)
			}
			if mechanic(dep) && !mechanic(name) && part(name) == library {
				usedBy[dep] = append(usedBy[dep], name)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("docs/architecture.md lists %s, which is no package of the module", name)
		}
	}
	// internal/ keeps only the library's mechanics: each is imported by
	// one of its packages (the root or one outside internal/, directly
	// or through another mechanic), else it belongs to the program or
	// the rig. Only internal itself (documentation) imports nothing.
	for name := range seen {
		if mechanic(name) && name != "internal" && !reached(name, usedBy, imports) {
			t.Errorf("%s is under internal/ but no package of the library imports it: move it to the program (cmd/aegis/internal) or the rig (internal/testing)", name)
		}
	}
}

// The parts of the module, as docs/architecture.md names them.
const (
	library  = "library"
	rig      = "rig"
	program  = "program"
	examples = "examples"
)

// allowed says which parts a part's packages may import (test files left
// out): the library stands alone; the rig (tests, benchmarks, the lab's
// servers) stands on the library; the program on both; an example only
// on the library, as a user's code would.
var allowed = map[string]map[string]bool{
	library:  {library: true},
	rig:      {library: true, rig: true},
	program:  {library: true, rig: true, program: true},
	examples: {library: true, examples: true},
}

// part names the part a package (relative to the module) belongs to.
func part(name string) string {
	under := func(p string) bool { return name == p || strings.HasPrefix(name, p+"/") }
	switch {
	case under("internal/testing"):
		return rig
	case under("cmd"):
		return program
	case under("examples"):
		return examples
	}
	return library
}

// mechanic reports whether a package is one of the library's mechanics:
// under internal/, apart from the rig.
func mechanic(name string) bool {
	return part(name) == library && (name == "internal" || strings.HasPrefix(name, "internal/"))
}

// reached reports whether a mechanic is imported by the library outside
// internal/, directly or through other mechanics.
func reached(name string, usedBy, importers map[string][]string) bool {
	seen := map[string]bool{}
	var visit func(string) bool
	visit = func(m string) bool {
		if seen[m] {
			return false
		}
		seen[m] = true
		if len(usedBy[m]) > 0 {
			return true
		}
		for _, by := range importers[m] {
			if mechanic(by) && visit(by) {
				return true
			}
		}
		return false
	}
	return visit(name)
}
