// Package docs holds the checks that the documentation says what the code
// is: the README's layout names every package of the module, and the
// names docs/architecture.md uses resolve (its `pkg.Name`s are declared,
// its paths exist, the tracker's map names the tracker's own types).
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the module's directory.
const root = ".."

// goPackage is a directory of the module with Go files and what they
// declare: top-level names, and the methods and fields of its types.
type goPackage struct {
	dir     string // relative to the module
	name    string
	decls   map[string]string // top-level name -> the file declaring it
	members map[string]bool   // methods and struct fields, of any type
	tests   *goPackage        // what its test files declare
}

// modulePackages finds every package of the module (test-only ones too),
// parsing the non-test files.
func modulePackages(t *testing.T) []*goPackage {
	t.Helper()
	var out []*goPackage
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		base := d.Name()
		if path != root && (strings.HasPrefix(base, ".") || base == "node_modules" || base == "testdata" || base == "tools") {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		if len(files) == 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		p := &goPackage{dir: filepath.ToSlash(rel), decls: map[string]string{}, members: map[string]bool{},
			tests: &goPackage{decls: map[string]string{}, members: map[string]bool{}}}
		fset := token.NewFileSet()
		for _, f := range files {
			test := strings.HasSuffix(f, "_test.go")
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("cannot parse %s: %v", f, err)
			}
			if !test || p.name == "" {
				p.name = strings.TrimSuffix(af.Name.Name, "_test")
			}
			if test {
				collect(p.tests, af, filepath.Base(f))
				continue
			}
			collect(p, af, filepath.Base(f))
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func collect(p *goPackage, af *ast.File, file string) {
	for _, d := range af.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil {
				p.members[d.Name.Name] = true
			} else {
				p.decls[d.Name.Name] = file
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					p.decls[s.Name.Name] = file
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, f := range st.Fields.List {
							for _, n := range f.Names {
								p.members[n.Name] = true
							}
						}
					}
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								p.members[n.Name] = true
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.decls[n.Name] = file
					}
				}
			}
		}
	}
}

// TestLayoutListsEveryPackage: the README's layout names the directory
// of every package of the module (a package may be named inside the
// entry of its parent: "internal/store ... chunk ...").
func TestLayoutListsEveryPackage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	words := map[string]bool{}
	for _, w := range regexp.MustCompile(`[A-Za-z0-9_/.-]+`).FindAllString(layout, -1) {
		words[strings.TrimSuffix(w, "/")] = true
	}
	for _, p := range modulePackages(t) {
		// Its path, or, below a listed parent, its last element.
		listed := words[p.dir]
		if !listed && words[filepath.Base(p.dir)] {
			for parent := filepath.Dir(p.dir); parent != "." && !listed; parent = filepath.Dir(parent) {
				listed = words[parent]
			}
		}
		if !listed {
			t.Errorf("README.md's layout does not list %s", p.dir)
		}
	}
}

// TestArchitectureNamesResolve: every `pkg.Name` (and `pkg.Type.Member`)
// that docs/architecture.md uses, for a package of the module, is
// declared there; every internal/... path it names exists; every name in
// the tracker's map of its parts is the tracker's.
func TestArchitectureNamesResolve(t *testing.T) {
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	pkgs := map[string][]*goPackage{}
	var tracker *goPackage
	for _, p := range modulePackages(t) {
		pkgs[p.name] = append(pkgs[p.name], p)
		if p.dir == "internal/tracker" {
			tracker = p
		}
	}
	resolves := func(pkg, name, member string) bool {
		for _, p := range pkgs[pkg] {
			if _, ok := p.decls[name]; ok && (member == "" || p.members[member]) {
				return true
			}
			if member == "" && p.members[name] { // a method: tracker.Tick
				return true
			}
		}
		return false
	}
	checked := 0
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9]*)\\.([A-Z][A-Za-z0-9_]*)(?:\\.([A-Za-z][A-Za-z0-9_]*))?(?:\\(\\))?`").FindAllStringSubmatch(doc, -1) {
		if pkgs[m[1]] == nil {
			continue // not a package of the module: a setting, a file
		}
		checked++
		if !resolves(m[1], m[2], m[3]) {
			t.Errorf("docs/architecture.md names %s, which package %s does not declare", m[0], m[1])
		}
	}
	for _, path := range regexp.MustCompile(`\binternal/[A-Za-z0-9_/]*[A-Za-z0-9_]+(?:\.go)?`).FindAllString(doc, -1) {
		checked++
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			t.Errorf("docs/architecture.md names %s, which does not exist", path)
		}
	}
	// The tracker's map: a table whose rows name a part's type and files,
	// its state and its view, all of them the tracker's (its tests' fakes
	// too).
	_, tmap, ok := strings.Cut(doc, "### The tracker's parts")
	if !ok || tracker == nil {
		t.Fatal("docs/architecture.md has no map of the tracker's parts")
	}
	tmap, _, _ = strings.Cut(tmap, "\n### ")
	var names []string
	for _, m := range regexp.MustCompile("`([A-Za-z][A-Za-z0-9]*)`").FindAllStringSubmatch(tmap, -1) {
		names = append(names, m[1])
	}
	for _, m := range regexp.MustCompile("`([A-Za-z0-9_]+\\.go)`").FindAllStringSubmatch(tmap, -1) {
		if _, err := os.Stat(filepath.Join(root, "internal/tracker", m[1])); err != nil {
			t.Errorf("the tracker's map names %s, which is not the tracker's", m[1])
		}
		checked++
	}
	// The drawing of the map (its code block): each part's method it
	// names (attributor.classifyAll) is the part's, and each name of two
	// words run together (classifyNew, attributionView) the tracker's.
	drawn := 0
	for _, block := range regexp.MustCompile("(?s)```\n(.*?)```").FindAllStringSubmatch(tmap, -1) {
		for _, m := range regexp.MustCompile(`\b([A-Za-z][A-Za-z0-9]*)\.([A-Za-z][A-Za-z0-9]*)\b`).FindAllStringSubmatch(block[1], -1) {
			if _, ok := tracker.decls[m[1]]; !ok {
				continue // a file (job.xml); a part's own name is checked below
			}
			if !tracker.members[m[2]] {
				t.Errorf("the drawing of the tracker's map names %s, which the tracker does not declare", m[0])
			}
			drawn++
		}
		for _, m := range regexp.MustCompile(`\b[a-z]+[A-Z][A-Za-z0-9]*\b`).FindAllString(block[1], -1) {
			names = append(names, m)
			drawn++
		}
	}
	if drawn < 20 {
		t.Errorf("only %d names checked in the drawing of the tracker's map: the patterns no longer match it", drawn)
	}
	sort.Strings(names)
	for _, n := range names {
		checked++
		_, ok := tracker.decls[n]
		_, inTests := tracker.tests.decls[n]
		if !ok && !inTests && !tracker.members[n] {
			t.Errorf("the tracker's map names %s, which the tracker does not declare", n)
		}
	}
	if checked < 50 {
		t.Errorf("only %d names checked: the patterns no longer match the document", checked)
	}
}
