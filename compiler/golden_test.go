package compiler_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/policy"
)

var update = flag.Bool("update", false, "rewrite the goldens under testdata/golden, testdata/cel and testdata/extensions")

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// mustCompile compiles a policy given as text; file names it (and locates
// extension paths).
func mustCompile(t testing.TB, file, src string) *policy.Compiled {
	t.Helper()
	c, err := compiler.Compile(file, []byte(src))
	if err != nil {
		t.Fatalf("compile %s:\n%v", file, err)
	}
	return c
}

// policyModule returns the generated module of a compiled policy.
func policyModule(t testing.TB, c *policy.Compiled) string {
	t.Helper()
	var found []string
	for _, m := range c.Modules {
		if m.Name == compiler.PolicyModule {
			found = append(found, m.Source)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d modules named %s, want 1", len(found), compiler.PolicyModule)
	}
	return found[0]
}

// diagList asserts that err is a non-empty diag.List of well-formed diagnostics.
func diagList(t testing.TB, err error) diag.List {
	t.Helper()
	var l diag.List
	if !errors.As(err, &l) {
		t.Fatalf("error is a %T, not a diag.List: %v", err, err)
	}
	if len(l) == 0 {
		t.Fatal("empty diag.List as an error")
	}
	for _, d := range l {
		if d.Code == "" || d.Message == "" {
			t.Errorf("diagnostic without code or message: %#v", d)
		}
	}
	return l
}

// compareGolden compares got with the file, or rewrites the file under -update.
func compareGolden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./compiler -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./compiler -run %s -update rewrites it)\n--- got:\n%s\n--- want:\n%s", file, t.Name(), got, want)
	}
}

// goldenCases lists testdata/golden/<case>/policy.yaml. (The input cannot be
// policy.json: that name is the golden normalized document.)
func goldenCases(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestGolden compiles every testdata/golden/<case>/policy.yaml and compares the
// generated module, the normalized document and the digest with the files beside it.
func TestGolden(t *testing.T) {
	cases := goldenCases(t)
	if len(cases) < 8 {
		t.Errorf("only %d golden cases", len(cases))
	}
	for _, in := range cases {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c, err := compiler.CompileFile(in)
			if err != nil {
				t.Fatalf("compile:\n%v", err)
			}
			if !digestRE.MatchString(c.Digest) {
				t.Errorf("digest %q", c.Digest)
			}
			if got := compiler.Digest(c.Document); got != c.Digest {
				t.Errorf("Digest is %s, but the document hashes to %s", c.Digest, got)
			}
			mod := policyModule(t, c)
			if !strings.Contains(mod, c.Digest) {
				t.Errorf("generated module does not name the digest %s", c.Digest)
			}
			// Modules: the base library, then the generated policy, then one per extension.
			n := len(c.Policy.Rego)
			if len(c.Modules) < 1+n || c.Modules[len(c.Modules)-1-n].Name != compiler.PolicyModule {
				t.Errorf("module order: %v", moduleNames(c))
			}
			for i, r := range c.Policy.Rego {
				m := c.Modules[len(c.Modules)-n+i]
				if r.Path != "" || m.Source != r.Source {
					t.Errorf("extension %d: module %s does not hold the normalized source (path %q)", i, m.Name, r.Path)
				}
			}
			compareGolden(t, filepath.Join(dir, "policy.rego"), []byte(mod))
			compareGolden(t, filepath.Join(dir, "policy.json"), append(append([]byte{}, c.Document...), '\n'))
			compareGolden(t, filepath.Join(dir, "digest.txt"), []byte(c.Digest+"\n"))
		})
	}
}

func moduleNames(c *policy.Compiled) []string {
	var out []string
	for _, m := range c.Modules {
		out = append(out, m.Name)
	}
	return out
}

// errorCases lists the policy files directly in dir.
func errorCases(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.yaml", "*.json"} {
		files, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, files...)
	}
	return out
}

// testWantDir compiles each policy in dir, which must fail, and compares the
// diagnostics (one per line) with <case>.want.
func testWantDir(t *testing.T, dir string, min int, check func(t *testing.T, file string, l diag.List)) {
	files := errorCases(t, dir)
	if len(files) < min {
		t.Errorf("only %d cases in %s", len(files), dir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), filepath.Ext(f)), func(t *testing.T) {
			c, err := compiler.CompileFile(f)
			if err == nil {
				t.Fatalf("compiled (digest %s), want an error", c.Digest)
			}
			if c != nil {
				t.Errorf("a result together with an error")
			}
			l := diagList(t, err)
			var lines []string
			for _, d := range l {
				lines = append(lines, d.String())
				if strings.HasPrefix(d.Message, "internal") {
					t.Errorf("internal error for a user mistake: %s", d)
				}
			}
			got := strings.Join(lines, "\n") + "\n"
			if err.Error()+"\n" != got {
				t.Errorf("Error() is not the diagnostics one per line:\n%s", err)
			}
			sorted := append(diag.List(nil), l...)
			sorted.Sort()
			for i := range l {
				if sorted[i] != l[i] {
					t.Errorf("diagnostics are not sorted:\n%s", got)
					break
				}
			}
			check(t, f, l)
			compareGolden(t, strings.TrimSuffix(f, filepath.Ext(f))+".want", []byte(got))
		})
	}
	// A .want left behind by a renamed input.
	wants, _ := filepath.Glob(filepath.Join(dir, "*.want"))
	for _, w := range wants {
		base := strings.TrimSuffix(w, ".want")
		if _, err1 := os.Stat(base + ".yaml"); err1 != nil {
			if _, err2 := os.Stat(base + ".json"); err2 != nil {
				t.Errorf("%s has no input", w)
			}
		}
	}
}

var celPointerRE = regexp.MustCompile(`^/(tools/[^/]+|default_rule)/when/[0-9]+/expr$`)

// TestCELErrors: syntax and type errors in constraints, with their goldens.
func TestCELErrors(t *testing.T) {
	testWantDir(t, filepath.Join("testdata", "cel"), 8, func(t *testing.T, file string, l diag.List) {
		for _, d := range l {
			if d.Code != diag.CodeCELSyntax && d.Code != diag.CodeCELType {
				t.Errorf("code %q, want a CEL code: %s", d.Code, d)
			}
			if !celPointerRE.MatchString(d.Pointer) {
				t.Errorf("pointer %q is not /tools/<name>/when/<i>/expr: %s", d.Pointer, d)
			}
			if d.File != file || d.Line == 0 || d.Col == 0 {
				t.Errorf("position %q, want %s:line:col", d.Position, file)
			}
		}
	})
}

// TestExtensionErrors: problems in Rego extensions, with their goldens.
func TestExtensionErrors(t *testing.T) {
	testWantDir(t, filepath.Join("testdata", "extensions"), 15, func(t *testing.T, file string, l diag.List) {
		for _, d := range l {
			if !strings.HasPrefix(d.Pointer, "/rego/") {
				t.Errorf("pointer %q is not in /rego: %s", d.Pointer, d)
			}
			if d.Line == 0 {
				t.Errorf("no line: %s", d)
			}
			// A module read from a file is blamed in that file; one given inline,
			// at its source in the policy, with the module position in the message.
			if strings.HasSuffix(d.Pointer, "/path") && d.Code != diag.CodeIO {
				if !strings.HasSuffix(d.File, ".rego") {
					t.Errorf("error in an extension file is not placed in it: %s", d)
				}
			} else if d.File != file {
				t.Errorf("position %q, want in %s", d.Position, file)
			}
		}
	})
}

// TestForbiddenBuiltins: one case per outside-world builtin, each naming it.
func TestForbiddenBuiltins(t *testing.T) {
	for _, b := range []string{"http.send", "net.lookup_ip_addr", "time.now_ns", "rand.intn", "uuid.rfc4122", "opa.runtime"} {
		file := filepath.Join("testdata", "extensions", "forbidden_"+strings.ReplaceAll(b, ".", "_")+".yaml")
		t.Run(b, func(t *testing.T) {
			_, err := compiler.CompileFile(file)
			if err == nil {
				t.Fatal("compiled")
			}
			found := false
			for _, d := range diagList(t, err) {
				if d.Code == diag.CodeRegoBuiltin && strings.Contains(d.Message, "builtin "+b+" ") {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s diagnostic naming %s:\n%v", diag.CodeRegoBuiltin, b, err)
			}
		})
	}
}
