package rego

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestLibrary runs the library's own Rego tests with OPA's tester, compiled
// with the allowlist's capabilities: the library uses only allowed builtins.
func TestLibrary(t *testing.T) {
	modules := map[string]*ast.Module{}
	for _, m := range append(Library(), Tests()...) {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		modules[m.Name] = mod
	}
	ch, err := tester.NewRunner().SetCompiler(ast.NewCompiler().WithCapabilities(Capabilities())).SetModules(modules).EnableTracing(false).RunTests(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r := range ch {
		n++
		if r.Fail || r.Error != nil {
			t.Errorf("%s.%s: fail=%v error=%v", r.Package, r.Name, r.Fail, r.Error)
		}
	}
	if n < 12 {
		t.Errorf("ran %d Rego tests, expected at least 12", n)
	}
}
