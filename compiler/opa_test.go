package compiler_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// opaCheck does what `opa check DIR` does (cmd/check.go, not in bundle mode):
// load the directory with OPA's file loader and compile every module with the
// given capabilities. It returns the compiler errors.
func opaCheck(t *testing.T, dir string, caps *ast.Capabilities) ast.Errors {
	t.Helper()
	l := loader.NewFileLoader().
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotation(true).
		WithCapabilities(caps)
	res, err := l.Filtered([]string{dir}, nil)
	if err != nil {
		t.Fatalf("opa's loader: %v", err)
	}
	comp := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithUseTypeCheckAnnotations(true)
	comp.Compile(res.ParsedModules())
	return comp.Errors
}

// compileModules parses a compiled policy's modules and compiles them with caps.
func compileModules(t *testing.T, c *policy.Compiled, caps *ast.Capabilities) ast.Errors {
	t.Helper()
	mods := map[string]*ast.Module{}
	for _, m := range c.Modules {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1, Capabilities: caps})
		if err != nil {
			t.Fatalf("%s does not parse: %v", m.Name, err)
		}
		mods[m.Name] = mod
	}
	comp := ast.NewCompiler().WithCapabilities(caps)
	comp.Compile(mods)
	return comp.Errors
}

// TestStockOPA: a policy without CEL is plain Rego that stock OPA compiles with
// its own capabilities; one with CEL needs the capabilities file WriteDir writes.
func TestStockOPA(t *testing.T) {
	for _, name := range []string{"invoice", "price_list", "rate_limit", "scar_weights", "rego_inline", "rego_path", "no_tools"} {
		t.Run(name, func(t *testing.T) {
			c, err := compiler.CompileFile(filepath.Join("testdata", "golden", name, "policy.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Options) != 0 {
				t.Errorf("a policy without CEL has rego options")
			}
			if errs := compileModules(t, c, ast.CapabilitiesForThisVersion()); len(errs) > 0 {
				t.Errorf("stock OPA does not compile the modules:\n%v", errs)
			}
			dir := filepath.Join(t.TempDir(), "out")
			if err := compiler.WriteDir(c, dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "capabilities.json")); !os.IsNotExist(err) {
				t.Errorf("capabilities.json written for a policy without CEL (%v)", err)
			}
			if errs := opaCheck(t, dir, ast.CapabilitiesForThisVersion()); len(errs) > 0 {
				t.Errorf("opa check %s fails:\n%v", dir, errs)
			}
		})
	}
	t.Run("cel", func(t *testing.T) {
		c, err := compiler.CompileFile(filepath.Join("testdata", "golden", "cel_constraints", "policy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		errs := compileModules(t, c, ast.CapabilitiesForThisVersion())
		if len(errs) == 0 || !strings.Contains(errs.Error(), "lineage.cel") {
			t.Errorf("stock capabilities compile a policy that calls lineage.cel: %v", errs)
		}
		dir := filepath.Join(t.TempDir(), "out")
		if err := compiler.WriteDir(c, dir); err != nil {
			t.Fatal(err)
		}
		m := readManifest(t, dir)
		if m.Capabilities != "capabilities.json" {
			t.Errorf("manifest capabilities %q", m.Capabilities)
		}
		caps, err := ast.LoadCapabilitiesFile(filepath.Join(dir, "capabilities.json"))
		if err != nil {
			t.Fatal(err)
		}
		if errs := compileModules(t, c, caps); len(errs) > 0 {
			t.Errorf("does not compile with the written capabilities:\n%v", errs)
		}
		if errs := opaCheck(t, dir, caps); len(errs) > 0 {
			t.Errorf("opa check --capabilities %s/capabilities.json %s fails:\n%v", dir, dir, errs)
		}
		if errs := opaCheck(t, dir, ast.CapabilitiesForThisVersion()); len(errs) == 0 {
			t.Errorf("opa check without the capabilities passes a policy that calls lineage.cel")
		}
	})
}

func readManifest(t *testing.T, dir string) compiler.Manifest {
	t.Helper()
	var m compiler.Manifest
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "manifest.json"))), &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	return m
}

// listFiles returns the files under dir, relative, slash-separated, sorted.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestWriteDir(t *testing.T) {
	withExt, err := compiler.CompileFile(filepath.Join("testdata", "golden", "rego_path", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	withCEL, err := compiler.CompileFile(filepath.Join("testdata", "golden", "cel_constraints", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "compiled")

	check := func(c *policy.Compiled, extra ...string) {
		t.Helper()
		want := append([]string{"manifest.json", "policy.json"}, extra...)
		for _, m := range c.Modules {
			want = append(want, m.Name)
			if got := readFile(t, filepath.Join(dir, filepath.FromSlash(m.Name))); got != m.Source {
				t.Errorf("%s differs from the module", m.Name)
			}
		}
		sort.Strings(want)
		if got := listFiles(t, dir); !reflect.DeepEqual(got, want) {
			t.Errorf("files %v, want %v", got, want)
		}
		if got := readFile(t, filepath.Join(dir, "policy.json")); got != string(c.Document)+"\n" {
			t.Errorf("policy.json %q", got)
		}
		m := readManifest(t, dir)
		if m.Digest != c.Digest || m.Query != c.Query || m.Data != "policy.json" {
			t.Errorf("manifest %+v", m)
		}
		if !reflect.DeepEqual(m.Modules, moduleNames(c)) {
			t.Errorf("manifest modules %v, want %v", m.Modules, moduleNames(c))
		}
		if m.Versions["lineage"] == "" {
			t.Errorf("manifest versions %v", m.Versions)
		}
		// input.rule for whoever runs the modules without the runtime.
		if len(c.Policy.Rego) > 0 {
			if len(m.InputRules) != len(c.Policy.Tools) {
				t.Errorf("manifest input rules %v, want one per tool of %v", m.InputRules, c.Policy.Tools)
			}
			for tool, r := range m.InputRules {
				var got bytes.Buffer
				if err := json.Compact(&got, r); err != nil || got.String() != string(c.Rules[tool]) {
					t.Errorf("manifest input rule of %s: %s, want %s", tool, r, c.Rules[tool])
				}
			}
		} else if m.InputRules != nil {
			t.Errorf("manifest input rules %v for a policy without extensions", m.InputRules)
		}
		// Nothing left beside it: no temporary or old directories.
		entries, _ := os.ReadDir(parent)
		if len(entries) != 1 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("left in the parent: %v", names)
		}
	}

	if err := compiler.WriteDir(withExt, dir); err != nil {
		t.Fatal(err)
	}
	check(withExt)
	// Writing again replaces cleanly: the extension modules go, capabilities come.
	if err := compiler.WriteDir(withCEL, dir); err != nil {
		t.Fatal(err)
	}
	check(withCEL, "capabilities.json")
	if err := compiler.WriteDir(withExt, dir); err != nil {
		t.Fatal(err)
	}
	check(withExt)
	if err := compiler.WriteDir(withExt, dir+string(filepath.Separator)); err != nil {
		t.Errorf("with a trailing separator: %v", err)
	}
	check(withExt)

	t.Run("empty directory", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "empty")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := compiler.WriteDir(withExt, d); err != nil {
			t.Errorf("an empty directory is refused: %v", err)
		}
	})
	t.Run("not a compiled policy", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "src")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "main.go"), []byte("package main\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := compiler.WriteDir(withExt, d)
		if err == nil || !strings.Contains(err.Error(), "manifest.json") {
			t.Errorf("a directory without a manifest was replaced (err %v)", err)
		}
		if got := listFiles(t, d); !reflect.DeepEqual(got, []string{"main.go"}) {
			t.Errorf("the refused directory now holds %v", got)
		}
		entries, _ := os.ReadDir(filepath.Dir(d))
		if len(entries) != 1 {
			t.Errorf("a refused write left %d entries beside the directory", len(entries))
		}
	})
	t.Run("a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := compiler.WriteDir(withExt, f); err == nil {
			t.Errorf("a file was replaced by a directory")
		}
		if readFile(t, f) != "x" {
			t.Errorf("the file changed")
		}
	})
}
