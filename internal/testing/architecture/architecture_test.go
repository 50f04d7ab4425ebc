package architecture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// Every package of the module is in the table once, and imports only
// packages of lower layers; every package of the table exists.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	want := layers(t, root)
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	const module = "github.com/aegislab/aegis"
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name, _ := rel(p.ImportPath)
		seen[name] = true
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
			if library(name) && !library(dep) {
				t.Errorf("%s, a package of the library, imports %s, which is not", name, dep)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("docs/architecture.md lists %s, which is no package of the module", name)
		}
	}
}

// library reports whether the package (relative to the module) is part of
// the library: not the tool, the lab, the examples or the command.
func library(name string) bool {
	for _, p := range []string{"internal/testing", "examples", "cmd"} {
		if name == p || strings.HasPrefix(name, p+"/") {
			return false
		}
	}
	return true
}
