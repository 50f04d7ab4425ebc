// Command apicheck keeps the library's exported API on record: one file
// per library package under api/ (api/aegis.txt for the root, api/<path>.txt
// for the others), a line per exported name in the style of the Go
// project's api/ files, sorted. Its test fails when the API of the code
// differs from the files, naming the lines added and removed; `make api`
// (go run ./internal/testing/apicheck -write) rewrites them. Its test also
// holds CHANGELOG.md's table of migrations to the library's migration
// lists, so that each names the release that added it.
//
// The packages are read from their export data (go list -export), so the
// check costs what building them does, and the build cache makes it cheap.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// updateCmd is what a failed check tells the developer to run.
const updateCmd = "make api (go run ./internal/testing/apicheck -write)"

func main() {
	write := flag.Bool("write", false, "rewrite api/ from the code instead of checking it")
	flag.Parse()
	root, err := moduleRoot()
	if err == nil {
		if *write {
			err = Write(root)
		} else {
			err = Check(root)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

// moduleRoot is the directory of the go.mod of the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not in a module")
	}
	return filepath.Dir(mod), nil
}

// public reports whether a package (relative to the module, "." for the
// root) is one of the library's public packages: nothing under internal/,
// examples/ or cmd/, as docs/architecture.md has it.
func public(rel string) bool {
	for _, p := range []string{"internal", "examples", "cmd"} {
		if rel == p || strings.HasPrefix(rel, p+"/") || strings.Contains(rel, "/"+p+"/") || strings.HasSuffix(rel, "/"+p) {
			return false
		}
	}
	return true
}

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Name       string
	Export     string
	Module     *struct{ Path string }
}

// goList runs go list -json in root.
func goList(root string, args ...string) ([]listed, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	var ps []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// API is the exported API of the module's library packages: the file's
// name under api/ to its sorted lines. Only the library and what it
// imports are built for their export data.
func API(root string) (map[string][]string, error) {
	all, err := goList(root, "-json=ImportPath,Name,Module", "./...")
	if err != nil {
		return nil, err
	}
	rels := map[string]string{} // import path to path in the module
	var paths []string
	for _, p := range all {
		if p.Module == nil || p.Name == "main" {
			continue
		}
		rel := "."
		if p.ImportPath != p.Module.Path {
			rel = strings.TrimPrefix(p.ImportPath, p.Module.Path+"/")
		}
		if public(rel) {
			rels[p.ImportPath] = rel
			paths = append(paths, p.ImportPath)
		}
	}
	api := map[string][]string{}
	if len(paths) == 0 {
		return api, nil
	}
	deps, err := goList(root, append([]string{"-export", "-deps", "-json=ImportPath,Export"}, paths...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for _, p := range deps {
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	for _, path := range paths {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("read the export data of %s: %w", path, err)
		}
		name := rels[path] + ".txt"
		if rels[path] == "." {
			name = pkg.Name() + ".txt"
		}
		api[name] = Lines(pkg)
	}
	return api, nil
}

// Lines is the exported API of pkg, a line per name, sorted.
func Lines(pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	w := writer{qual}
	str, sig := w.typ, w.sig
	prefix := "pkg " + pkg.Path() + ", "
	var lines []string
	emit := func(format string, args ...any) {
		lines = append(lines, prefix+fmt.Sprintf(format, args...))
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			emit("const %s %s", name, constType(obj.Type(), str))
			emit("const %s = %s", name, obj.Val().ExactString())
		case *types.Var:
			emit("var %s %s", name, str(obj.Type()))
		case *types.Func:
			emit("func %s%s", name, sig(obj.Type().(*types.Signature)))
		case *types.TypeName:
			typeLines(obj, emit, str, sig)
		}
	}
	sort.Strings(lines)
	return slices.Compact(lines)
}

// writer writes types as the Go project's api files do: a package's own
// names unqualified, others by their package's name, and signatures
// without parameter names, so that renaming a parameter changes no line.
type writer struct{ qual types.Qualifier }

func (w writer) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Signature:
		return "func" + w.sig(t)
	case *types.Pointer:
		return "*" + w.typ(t.Elem())
	case *types.Slice:
		return "[]" + w.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), w.typ(t.Elem()))
	case *types.Map:
		return "map[" + w.typ(t.Key()) + "]" + w.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + w.typ(t.Elem())
		case types.RecvOnly:
			return "<-chan " + w.typ(t.Elem())
		}
		return "chan " + w.typ(t.Elem())
	}
	return types.TypeString(t, w.qual)
}

// sig is a signature's type parameters, parameters and results, without
// names.
func (w writer) sig(s *types.Signature) string {
	var b strings.Builder
	if tps := s.TypeParams(); tps.Len() > 0 {
		var ps []string
		for p := range tps.TypeParams() {
			ps = append(ps, p.Obj().Name()+" "+w.typ(p.Constraint()))
		}
		b.WriteString("[" + strings.Join(ps, ", ") + "]")
	}
	var ps []string
	for i := range s.Params().Len() {
		p := s.Params().At(i)
		if s.Variadic() && i == s.Params().Len()-1 {
			ps = append(ps, "..."+w.typ(p.Type().(*types.Slice).Elem()))
			continue
		}
		ps = append(ps, w.typ(p.Type()))
	}
	b.WriteString("(" + strings.Join(ps, ", ") + ")")
	var rs []string
	for r := range s.Results().Variables() {
		rs = append(rs, w.typ(r.Type()))
	}
	switch len(rs) {
	case 0:
	case 1:
		b.WriteString(" " + rs[0])
	default:
		b.WriteString(" (" + strings.Join(rs, ", ") + ")")
	}
	return b.String()
}

// constType is a constant's type, the Go project's ideal-int and kin for
// an untyped one.
func constType(t types.Type, str func(types.Type) string) string {
	if b, ok := t.(*types.Basic); ok && b.Info()&types.IsUntyped != 0 {
		switch b.Kind() {
		case types.UntypedBool:
			return "ideal-bool"
		case types.UntypedInt, types.UntypedRune:
			return "ideal-int"
		case types.UntypedFloat:
			return "ideal-float"
		case types.UntypedComplex:
			return "ideal-complex"
		case types.UntypedString:
			return "ideal-string"
		}
	}
	return str(t)
}

// typeLines emits an exported type: its kind, then its exported fields,
// interface methods and declared methods.
func typeLines(obj *types.TypeName, emit func(string, ...any), str func(types.Type) string, sig func(*types.Signature) string) {
	name := obj.Name()
	if obj.IsAlias() {
		emit("type %s = %s", name, str(obj.Type()))
		return
	}
	named := obj.Type().(*types.Named)
	head := name
	if tps := named.TypeParams(); tps.Len() > 0 {
		var ps []string
		for p := range tps.TypeParams() {
			ps = append(ps, p.Obj().Name()+" "+str(p.Constraint()))
		}
		head += "[" + strings.Join(ps, ", ") + "]"
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		emit("type %s struct", head)
		for f := range u.Fields() {
			if !f.Exported() {
				continue
			}
			if f.Embedded() {
				emit("type %s struct, embedded %s", head, str(f.Type()))
				continue
			}
			emit("type %s struct, %s %s", head, f.Name(), str(f.Type()))
		}
	case *types.Interface:
		var names []string
		for m := range u.Methods() {
			if m.Exported() {
				names = append(names, m.Name())
				emit("type %s interface, %s%s", head, m.Name(), sig(m.Type().(*types.Signature)))
			} else {
				names = append(names, "unexported methods")
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		emit("type %s interface { %s }", head, strings.Join(names, ", "))
	default:
		emit("type %s %s", head, str(u))
	}
	for m := range named.Methods() {
		if !m.Exported() {
			continue
		}
		s := m.Type().(*types.Signature)
		recv := name
		if tps := named.TypeParams(); tps.Len() > 0 {
			var ps []string
			for p := range tps.TypeParams() {
				ps = append(ps, p.Obj().Name())
			}
			recv += "[" + strings.Join(ps, ", ") + "]"
		}
		if _, ptr := s.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + recv
		}
		emit("method (%s) %s%s", recv, m.Name(), sig(s))
	}
}

// read is the api/ directory's files: name to lines.
func read(root string) (map[string][]string, error) {
	dir := filepath.Join(root, "api")
	files := map[string][]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".txt") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return files, nil
	}
	return files, err
}

// Diff compares the API of the code with the files: nil when they agree,
// otherwise an error listing, per file, the lines the code added (+) and
// removed (-), and the command that updates the files.
func Diff(code, files map[string][]string) error {
	names := map[string]bool{}
	for n := range code {
		names[n] = true
	}
	for n := range files {
		names[n] = true
	}
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(names)) {
		have, inCode := code[n]
		onFile, inFiles := files[n]
		switch {
		case !inFiles:
			fmt.Fprintf(&b, "api/%s: missing (a new package of the library)\n", n)
		case !inCode:
			fmt.Fprintf(&b, "api/%s: no such package of the library any more\n", n)
			continue
		}
		onSet := map[string]bool{}
		for _, l := range onFile {
			onSet[l] = true
		}
		haveSet := map[string]bool{}
		for _, l := range have {
			haveSet[l] = true
			if !onSet[l] {
				fmt.Fprintf(&b, "api/%s: +%s\n", n, l)
			}
		}
		for _, l := range onFile {
			if !haveSet[l] {
				fmt.Fprintf(&b, "api/%s: -%s\n", n, l)
			}
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return fmt.Errorf("the exported API differs from api/ (+ in the code only, - in api/ only):\n%sIf the change is meant, run %s, commit api/ and say it in CHANGELOG.md", b.String(), updateCmd)
}

// Check compares the module's API with its api/ files (Diff).
func Check(root string) error {
	code, err := API(root)
	if err != nil {
		return err
	}
	files, err := read(root)
	if err != nil {
		return err
	}
	return Diff(code, files)
}

// Write rewrites api/ from the code: a file per library package, none for
// a package that is gone.
func Write(root string) error {
	code, err := API(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "api")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for name, lines := range code {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
