package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// libraryPackages are what a program that uses softrdma imports.
var libraryPackages = []string{"verbs", "cm", "rdmanet", "provider/soft", "provider/shm", "provider/ibverbs"}

// heavyModules are the modules only the tools and adapters may pull in:
// plotting, packet capture, Prometheus.
var heavyModules = []string{"gonum.org/v1/plot", "github.com/gopacket/", "github.com/prometheus/"}

// TestLibraryDeps: building a program against the library packages
// compiles no plotting, pcap or Prometheus code. The adapters that need
// them (transport/capture, metrics) are wired by the tools.
func TestLibraryDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	args := []string{"list", "-deps"}
	for _, p := range libraryPackages {
		args = append(args, module+"/"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		for _, m := range heavyModules {
			if strings.HasPrefix(d, m) {
				t.Errorf("the library packages depend on %s; keep it in an adapter the tools wire (transport/capture, metrics)", d)
			}
		}
	}
}

// envFuncs are the functions that read the process environment.
var envFuncs = map[string]map[string]bool{
	"os":      {"Getenv": true, "LookupEnv": true, "Environ": true, "ExpandEnv": true},
	"syscall": {"Getenv": true, "Environ": true},
}

// readsEnv returns the calls in f that read the environment, as
// "os.Getenv" at their position.
func readsEnv(fset *token.FileSet, f *ast.File) []string {
	names := map[string]string{} // local name → import path, for os and syscall
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if envFuncs[p] == nil {
			continue
		}
		name := p
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && envFuncs[names[id.Name]][sel.Sel.Name] {
			found = append(found, fset.Position(sel.Pos()).String()+": "+names[id.Name]+"."+sel.Sel.Name)
		}
		return true
	})
	return found
}

// toolDirs may read the environment: the command, the tools it runs,
// their tests, benchmarks and examples. Everything else is library.
func toolDir(rel string) bool {
	for _, p := range []string{"cmd", "internal/tools", "internal/layering", "test", "bench", "examples"} {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// TestLibraryReadsNoEnvironment: no library package reads an environment
// variable, so a program behaves as its code configures it; the tools map
// SOFTRDMA_* to Config fields (internal/tools/device, docs/tools.md).
// Tests may read variables of their own.
func TestLibraryReadsNoEnvironment(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || toolDir(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		for _, call := range readsEnv(fset, f) {
			t.Errorf("%s: a library package reads the environment; add a Config field and map the variable in internal/tools/device", call)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("checked %d library files: is the walk rooted at the module?", files)
	}
}

func TestReadsEnvCatches(t *testing.T) {
	src := `package p
import (
	o "os"
	"syscall"
)
func f() { _ = o.Getenv("X"); _, _ = o.LookupEnv("Y"); _ = syscall.Environ(); _ = o.Args }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := readsEnv(fset, f); len(got) != 3 {
		t.Fatalf("found %q, want the three environment reads", got)
	}
}
