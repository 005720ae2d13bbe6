package compiler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"

	"github.com/lineage-guard/lineage/policy/policytest"
	lineagerego "github.com/lineage-guard/lineage/rego"
)

// opaFmt is what `opa fmt` writes for a Rego v1 module.
func opaFmt(t *testing.T, name, src string) string {
	t.Helper()
	out, err := format.SourceWithOpts(name, []byte(src), format.Opts{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatalf("opa fmt %s: %v", name, err)
	}
	return string(out)
}

// TestGeneratedIsFormatted: the Rego the compiler writes, in both its forms
// (one chain, and the table of a large policy: D60 (a policy of more than 64 tools is a table)), and the library in
// rego/ are exactly what `opa fmt` writes.
func TestGeneratedIsFormatted(t *testing.T) {
	files := testPolicies(t)
	checked := 0
	check := func(name, src string) {
		t.Helper()
		if want := opaFmt(t, name, src); want != src {
			t.Errorf("%s is not as opa fmt writes it:\n%s", name, lineDiff(src, want))
		}
		checked++
	}
	for _, file := range files {
		for _, max := range []int{chainTools, 0} {
			c := compileWith(t, file, max)
			check(fmt.Sprintf("%s (chain up to %d tools)", file, max), c.Modules[len(lineagerego.Library())].Source)
		}
	}
	c, err := Compile("many.yaml", policytest.ManyTools(chainTools+1))
	if err != nil {
		t.Fatal(err)
	}
	check("many.yaml", c.Modules[len(lineagerego.Library())].Source)
	for _, m := range append(lineagerego.Library(), lineagerego.Tests()...) {
		check(m.Name, m.Source)
	}
	if checked < 2*len(files)+3 {
		t.Errorf("checked %d modules", checked)
	}
}

// lineDiff shows the first line where got and want part.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  generated: %q\n  opa fmt:   %q", i+1, gl, wl)
		}
	}
	return fmt.Sprintf("%d lines generated, %d written by opa fmt", len(g), len(w))
}
