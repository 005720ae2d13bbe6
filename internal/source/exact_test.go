package source

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/internal/diag"
)

// TestExactMemberNamesEveryKind: in each kind of file internal/source reads
// (a policy, a case file, an auth file), a member spelled with other capitals
// is an unknown field at its own pointer, never the field (D232 (member names matched exactly) member names
// matched exactly; D370: one reader for policies and case files).
func TestExactMemberNamesEveryKind(t *testing.T) {
	for _, c := range []struct{ schema, file, src, want string }{
		{"policy", "p.json", `{"budget": 1, "Tools": {}}`, `p.json:1:15: /Tools: unknown field "Tools"`},
		{"policy", "p.yaml", "budget: 1\ntools:\n  pay: {COST: 1}\n", `p.yaml:3:9: /tools/pay/COST: unknown field "COST"`},
		{"conformance", "c.yaml", "cases:\n  - name: x\n    Steps: []\n", `c.yaml:3:5: /cases/0/Steps: unknown field "Steps"`},
		{"auth", "a.json", `{"Principals": []}`, `a.json:1:2: /Principals: unknown field "Principals"`},
	} {
		d := mustLoad(t, c.file, c.src)
		got := Validate(d, c.schema)
		found := false
		for _, x := range got {
			if x.Code == diag.CodeUnknownField && strings.HasPrefix(x.String(), c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %s: want %s, got\n%v", c.schema, c.src, c.want, got)
		}
	}
}

// TestLoadWithNumbers: a deferred number problem does not fail the load and
// comes back from Validate on the Sub that holds it, rebased; an exact
// number is kept as written; elsewhere the D231 (numbers a double holds) rule fails the load.
func TestLoadWithNumbers(t *testing.T) {
	src := "policy:\n  budget: 3\n  tools:\n    pay: {cost: 100.000000000000001}\nat: 7456146436.854775807\ncases: []\n"
	opts := LoadOptions{
		Defer: func(p string) bool { return strings.HasPrefix(p, "/policy/") },
		Exact: func(p string) bool { return p == "/at" },
	}
	d, diags := LoadWith("c.yaml", []byte(src), opts)
	if len(diags) > 0 {
		t.Fatalf("load: %v", diags)
	}
	if got := d.Value.(map[string]any)["at"]; got != any(jsonNumber("7456146436.854775807")) {
		t.Errorf("at: %v", got)
	}
	got := Validate(d.Sub("/policy"), "policy")
	if len(got) != 1 || got[0].String() != "c.yaml:4:17: /tools/pay/cost: number 100.000000000000001 has more digits than a double keeps (bad_number)" {
		t.Errorf("policy: %v", got)
	}
	if _, diags := Load("c.yaml", []byte(src)); len(diags) != 2 {
		t.Errorf("without options, both numbers fail the load: %v", diags)
	}
}

type jsonNumber = json.Number
