package compiler_test

import (
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
)

// TestArgsSchemaErrors: an args_schema that is not a valid, supported JSON
// Schema 2020-12 is a compile error with code args_schema at the JSON pointer
// of the offending keyword and its file:line:col, every rule's schema
// reported (D320 (argument schemas in Rego), D321 (argument schema keywords)).
func TestArgsSchemaErrors(t *testing.T) {
	src := `budget: 3
default_rule:
  cost: 1
  args_schema: { type: object, properties: { p: { type: string, pattern: "(" } } }
tools:
  a:
    cost: 1
    args_schema:
      type: object
      properties:
        m: { $ref: "https://x.org/s.json" }
  b:
    cost: 1
    args_schema:
      type: object
      properties:
        n: { type: integr }
  c:
    cost: 1
    args_schema: { type: object, dependentRequired: { a: [b] } }
`
	_, err := compiler.Compile("p.yaml", []byte(src))
	ds, ok := err.(diag.List)
	if !ok {
		t.Fatalf("want a diag.List, got %v", err)
	}
	want := []string{
		"p.yaml:4:74: /default_rule/args_schema/properties/p/pattern: ",
		"p.yaml:11:20: /tools/a/args_schema/properties/m/$ref: $ref \"https://x.org/s.json\" is not local",
		"p.yaml:17:20: /tools/b/args_schema/properties/n/type: ",
		"p.yaml:20:34: /tools/c/args_schema/dependentRequired: keyword \"dependentRequired\" is not supported",
	}
	got := strings.Split(strings.TrimSpace(ds.Error()), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d diagnostics, want %d:\n%s", len(got), len(want), ds.Error())
	}
	for i, d := range ds {
		if d.Code != diag.CodeArgsSchema {
			t.Errorf("%s: code %s, want %s", d, d.Code, diag.CodeArgsSchema)
		}
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("diagnostic %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
}

// TestArgsSchemaKeepsDigests: a policy without args_schema normalizes to the
// document it did before the field existed (no args_schema member), so that
// logs recorded then reopen with their digest; one with a schema records it.
func TestArgsSchemaKeepsDigests(t *testing.T) {
	c, err := compiler.Compile("p.yaml", []byte("budget: 3\ntools:\n  a: {cost: 1}\ndefault_rule: {cost: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(c.Document), "args_schema") {
		t.Errorf("normalized document names args_schema: %s", c.Document)
	}
	r, err := compiler.CompileRecorded(c.Document)
	if err != nil || r.Digest != c.Digest {
		t.Fatalf("recorded: %v, digest %s, want %s", err, r.Digest, c.Digest)
	}
	c, err = compiler.Compile("p.yaml", []byte("budget: 3\ntools:\n  a: {cost: 1, args_schema: {type: object, required: [x], properties: {x: {maximum: 1.0}}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"args_schema":{"properties":{"x":{"maximum":1}},"required":["x"],"type":"object"}`; !strings.Contains(string(c.Document), want) {
		t.Errorf("normalized document %s lacks %s", c.Document, want)
	}
	if r, err := compiler.CompileRecorded(c.Document); err != nil || r.Digest != c.Digest {
		t.Fatalf("recorded: %v", err)
	}
}
