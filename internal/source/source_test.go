package source

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/schema"
)

func mustLoad(t *testing.T, file, src string) *Document {
	t.Helper()
	d, diags := Load(file, []byte(src))
	if len(diags) > 0 {
		t.Fatalf("Load(%q): %v", src, diags)
	}
	return d
}

func canon(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestYAMLAndJSONAgree(t *testing.T) {
	y := mustLoad(t, "p.yaml", `
budget: 25000
rate_limit: {max_actions: 60, window_secs: 60}
tools:
  pay: {cost: 1, requires_approval: true, when: [{expr: "args.a < 1", reason: r}]}
default_rule: null
description: "line\nbreak"
`)
	j := mustLoad(t, "p.json", `{"budget": 25000, "rate_limit": {"max_actions": 60, "window_secs": 60},
	  "tools": {"pay": {"cost": 1, "requires_approval": true, "when": [{"expr": "args.a < 1", "reason": "r"}]}},
	  "default_rule": null, "description": "line\nbreak"}`)
	if !reflect.DeepEqual(y.Value, j.Value) {
		t.Errorf("YAML %s\nJSON %s", canon(t, y.Value), canon(t, j.Value))
	}
	if _, ok := y.Value.(map[string]any)["budget"].(json.Number); !ok {
		t.Errorf("budget is %T, want json.Number", y.Value.(map[string]any)["budget"])
	}
}

func TestYAMLScalars(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1", `1`},
		{"-7", `-7`},
		{"+5", `5`},
		{"0x1F", `31`},
		{"0o17", `15`},
		{"0b101", `5`},
		{"1_000", `1000`},
		{"1.5", `1.5`},
		{"1.0", `1.0`},
		{"1.", `1.0`},
		{".5", `0.5`},
		{"-.5e3", `-0.5e3`},
		{"+1e3", `1e3`},
		{"007.50", `7.50`},
		{"!!float 1", `1`},
		{"!!int '12'", `12`},
		{"!!str 12", `"12"`},
		{"'12'", `"12"`},
		{"true", `true`},
		{"False", `false`},
		{"yes", `"yes"`},
		{"~", `null`},
		{"null", `null`},
		{"2024-01-31", `"2024-01-31"`},
		{"9007199254740992", `9007199254740992`},
		{"<<", `"<<"`},
		{"!!null ''", `null`},
	} {
		d, diags := Load("x.yaml", []byte("v: "+c.in+"\n"))
		if len(diags) > 0 {
			t.Errorf("%s: %v", c.in, diags)
			continue
		}
		v := d.Value.(map[string]any)["v"]
		got := canon(t, v)
		if n, ok := v.(json.Number); ok {
			got = string(n) // the text as kept, not re-encoded
			if !json.Valid([]byte(got)) {
				t.Errorf("%s: %q is not a JSON number", c.in, got)
			}
		}
		if got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
}

func TestJSONNumbersKeptAsWritten(t *testing.T) {
	d := mustLoad(t, "x.json", `[1.0, -0, 1e2, 1E-2, 9007199254740992, -9007199254740992, 0.1]`)
	var got []string
	for _, v := range d.Value.([]any) {
		got = append(got, string(v.(json.Number)))
	}
	if want := "1.0 -0 1e2 1E-2 9007199254740992 -9007199254740992 0.1"; strings.Join(got, " ") != want {
		t.Errorf("got %v", got)
	}
}

func TestBadNumbers(t *testing.T) {
	for _, in := range []string{
		"9007199254740993", "-9007199254740993", "9007199254740992.5", "1e16", "90071992547409921e-1",
		"1e-400", "1e400", "100.000000000000001", "0.30000000000000001", strings.Repeat("1", 101),
	} {
		for _, src := range []string{"[" + in + "]", "- " + in + "\n"} {
			d, diags := Load("x", []byte(src))
			if len(diags) != 1 || diags[0].Code != diag.CodeNumber || d.Value != nil {
				t.Errorf("%q: %v", src, diags)
			}
		}
	}
	for _, in := range []string{"9007199254740992", "900719925474099.2e1", "0.000", "1e-300", "0e-9", "0e99999", "0.1", "-0", "100.00000000000001"} {
		if _, diags := Load("x", []byte("["+in+"]")); len(diags) > 0 {
			t.Errorf("%s: %v", in, diags)
		}
	}
}

func TestPositions(t *testing.T) {
	src := "budget: 3\ntools:\n  pay:\n    cost: 1\n    when:\n      - expr: x\n        reason: y\n  \"a/b~c\": {cost: 2}\n"
	d := mustLoad(t, "p.yaml", src)
	for _, c := range []struct {
		ptr       string
		pos, kpos string
	}{
		{"", "p.yaml:1:1", "p.yaml:1:1"},
		{"/budget", "p.yaml:1:9", "p.yaml:1:1"},
		{"/tools/pay", "p.yaml:4:5", "p.yaml:3:3"},
		{"/tools/pay/cost", "p.yaml:4:11", "p.yaml:4:5"},
		{"/tools/pay/when/0", "p.yaml:6:9", "p.yaml:6:9"},
		{"/tools/pay/when/0/reason", "p.yaml:7:17", "p.yaml:7:9"},
		{"/tools/a~1b~0c/cost", "p.yaml:8:19", "p.yaml:8:13"},
		{"/tools/pay/missing/deeper", "p.yaml:4:5", "p.yaml:4:5"},
		{"/nope", "p.yaml:1:1", "p.yaml:1:1"},
	} {
		if got := d.Pos(c.ptr).String(); got != c.pos {
			t.Errorf("Pos(%q) = %s, want %s", c.ptr, got, c.pos)
		}
		if got := d.KeyPos(c.ptr).String(); got != c.kpos {
			t.Errorf("KeyPos(%q) = %s, want %s", c.ptr, got, c.kpos)
		}
	}

	j := mustLoad(t, "p.json", "{\n  \"tools\": {\"pay\": {\"cost\": 1}},\n  \"x\": [true, \"é\", null]\n}")
	for ptr, want := range map[string]string{
		"":                "p.json:1:1",
		"/tools":          "p.json:2:12",
		"/tools/pay/cost": "p.json:2:29",
		"/x/1":            "p.json:3:15",
		"/x/2":            "p.json:3:20", // columns count characters, not bytes
	} {
		if got := j.Pos(ptr).String(); got != want {
			t.Errorf("JSON Pos(%q) = %s, want %s", ptr, got, want)
		}
	}
	if got := j.KeyPos("/tools/pay").String(); got != "p.json:2:13" {
		t.Errorf("JSON KeyPos = %s", got)
	}
}

func TestSub(t *testing.T) {
	src := "policy:\n  budget: 3\n  tools: {}\ncases:\n  - policy:\n      budget: 1\n      tools: {}\n      scar_limt: 5\n"
	d := mustLoad(t, "case.yaml", src)
	sub := d.Sub("/cases/0/policy")
	if sub == nil {
		t.Fatal("Sub: nil")
	}
	if got := canon(t, sub.Value); got != `{"budget":1,"scar_limt":5,"tools":{}}` {
		t.Errorf("Sub value %s", got)
	}
	if got := sub.Pos("/budget").String(); got != "case.yaml:6:15" {
		t.Errorf("Sub Pos = %s", got)
	}
	if got := sub.KeyPos("").String(); got != "case.yaml:6:7" {
		t.Errorf("Sub KeyPos(root) = %s", got)
	}
	diags := Validate(sub, "policy")
	want := `case.yaml:8:7: /scar_limt: unknown field "scar_limt" (did you mean "scar_limit"?) (unknown_field)`
	if len(diags) != 1 || diags[0].String() != want {
		t.Errorf("Validate(Sub) = %v", diags)
	}
	if d.Sub("/cases/1") != nil || d.Sub("/nope") != nil || d.Sub("/cases/00") != nil {
		t.Error("Sub of a missing pointer is not nil")
	}
	if whole := d.Sub(""); whole == nil || !reflect.DeepEqual(whole.Value, d.Value) {
		t.Error("Sub(\"\") is not the document")
	}
}

func TestLoadFailureHasNoValue(t *testing.T) {
	d, diags := Load("x.yaml", []byte("a: 1\na: 2\n"))
	if len(diags) == 0 || d == nil || d.Value != nil {
		t.Fatalf("got %v, %v", d, diags)
	}
	if v := Validate(d, "policy"); v != nil {
		t.Errorf("Validate after a failed Load: %v", v)
	}
	if d.Sub("") != nil {
		t.Error("Sub of a failed document")
	}
	var nilDoc *Document
	_ = nilDoc.Pos("/a")
	_ = nilDoc.KeyPos("/a")
	if nilDoc.Sub("") != nil || Validate(nilDoc, "policy") != nil {
		t.Error("nil Document")
	}
}

func TestCollectsEveryProblem(t *testing.T) {
	_, diags := Load("x.yaml", []byte("a: 1\na: 2\nb: 9007199254740993\nc: .inf\nd: !foo x\n"))
	var codes []string
	for _, d := range diags {
		codes = append(codes, d.Code)
	}
	if got := strings.Join(codes, " "); got != "duplicate_key bad_number bad_number syntax" {
		t.Errorf("codes %s:\n%v", got, diags)
	}
}

func TestYAMLStructure(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n", `{"base":{"x":1,"y":2},"m":{"x":1,"y":3}}`},
		{"a: &a {x: 1}\nb: &b {x: 2, z: 2}\nm: {<<: [*a, *b]}\n", `{"a":{"x":1},"b":{"x":2,"z":2},"m":{"x":1,"z":2}}`},
		{"l: &l [1, 2]\nm: *l\n", `{"l":[1,2],"m":[1,2]}`},
		{"123: a\n1.5: b\ntrue: c\n", `{"1.5":"b","123":"a","true":"c"}`},
		{"? complex key\n: v\n", `{"complex key":"v"}`},
		{"- a\n- [b, {c: d}]\n", `["a",["b",{"c":"d"}]]`},
		{"just text", `"just text"`},
		{"--- # one explicit document\na: 1\n...\n", `{"a":1}`},
		{"v: '1e400'\n", `{"v":"1e400"}`}, // quoted: text (plain, it is a number a double does not hold)
	} {
		d, diags := Load("x.yaml", []byte(c.in))
		if len(diags) > 0 {
			t.Errorf("%q: %v", c.in, diags)
			continue
		}
		if got := canon(t, d.Value); got != c.want {
			t.Errorf("%q: got %s, want %s", c.in, got, c.want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct{ file, in, want string }{
		{"x.json", "", "x.json: /: empty document (syntax)"},
		{"x.json", "{\"a\": 1,\n \"b\": }", "x.json:2:7: /b: missing value after the key: found '}' where a value should start (syntax)"},
		{"x.json", "{\"a\": tru}", "x.json:1:10: /a: invalid character '}' in literal true (expecting 'e') (syntax)"},
		{"x.json", "[1, 2", "x.json:1:6: /: unexpected end of input (syntax)"},
		{"x.json", "{\"a\": [1,\n 2,\n]}", "x.json:2:3: /a: trailing comma before ']' (JSON allows none) (syntax)"},
		{"x.json", "{\"a\": 1\n \"b\": 2}", "x.json:2:2: /: invalid character '\"' after a value in an object (expecting ',' or '}') (syntax)"},
		{"x.json", "{\"a\" 1}", "x.json:1:6: /a: invalid character '1' after an object key (expecting ':') (syntax)"},
		{"x.json", "{\"a\": \"x\\q\"}", "x.json:1:9: /a: invalid escape sequence `\\q` in string (syntax)"},
		{"x.json", "{\"a\": 1} {}", "x.json:1:10: /: unexpected data after the end of the document (syntax)"},
		{"x.yaml", "{a: 1}", "x.yaml:1:2: /: invalid character 'a' where an object key (a string in double quotes) should start (a document that starts with '{' or '[' is read as JSON) (syntax)"},
		{"x.yaml", "a: 1\n b: 2\n", "x.yaml:2:2: /: mapping values are not allowed in this context (syntax)"},
		{"x.yaml", "a: [1, 2\n", "x.yaml:1:1: /: did not find expected ',' or ']' (syntax)"},
		{"x.yaml", "a: *x\n", "x.yaml:1:4: /: alias *x refers to no anchor (&x) defined before it (syntax)"},
		{"x.yaml", "a: 1\n---\n", "x.yaml:2:1: /: a second YAML document starts here; a file holds exactly one document (syntax)"},
		{"x.yaml", "\xef\xbb\xbfa: \xc3\x28\n", "x.yaml:1:4: /: invalid UTF-8 (byte 0xc3); documents must be UTF-8 text (syntax)"},
		{"x.yaml", "---\n", "x.yaml: /: empty document (syntax)"},
	} {
		_, diags := Load(c.file, []byte(c.in))
		if len(diags) != 1 || diags[0].String() != c.want {
			t.Errorf("%q:\n got %v\nwant %s", c.in, diags, c.want)
		}
	}
}

func TestValidateReportsEveryUnknownField(t *testing.T) {
	d := mustLoad(t, "x.json", `{"budget": 1, "tools": {}, "zzz": 1, "buget": 2, "tool": 3, "a~b/c": 4}`)
	var got []string
	for _, x := range Validate(d, "policy") {
		got = append(got, x.Pointer+" "+x.Message)
	}
	want := []string{
		`/zzz unknown field "zzz"`,
		`/buget unknown field "buget" (did you mean "budget"?)`,
		`/tool unknown field "tool" (did you mean "tools"?)`,
		`/a~0b~1c unknown field "a~b/c"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidateOddToolNames(t *testing.T) {
	// Tool names that need escaping in JSON pointers and in URLs.
	d := mustLoad(t, "x.json", `{"budget": 1, "tools": {"a/b": {"cost": -1}, "c%d": {"cost": 1}, "e f": {"cost": 1, "x": 1}}}`)
	var got []string
	for _, x := range Validate(d, "policy") {
		got = append(got, x.String())
	}
	want := []string{
		`x.json:1:41: /tools/a~1b/cost: must be >= 0, got -1 (schema)`,
		`x.json:1:46: /tools/c%d: invalid tool name "c%d": must match ^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$ (schema)`,
		`x.json:1:66: /tools/e f: invalid tool name "e f": must match ^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$ (schema)`,
		`x.json:1:85: /tools/e f/x: unknown field "x" (unknown_field)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidateUnknownSchema(t *testing.T) {
	d := mustLoad(t, "x.json", `{}`)
	diags := Validate(d, "nope")
	if len(diags) != 1 || diags[0].Code != diag.CodeSchema {
		t.Errorf("got %v", diags)
	}
}

func TestValidateConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := mustLoad(t, "x.json", fmt.Sprintf(`{"budget": %d, "tools": {}, "scar_limt": 1}`, i))
			if diags := Validate(d, "policy"); len(diags) != 1 {
				t.Errorf("got %v", diags)
			}
		}(i)
	}
	wg.Wait()
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"a", "", 1}, {"scar_limt", "scar_limit", 1}, {"max_call", "max_calls", 1},
		{"cots", "cost", 1}, {"kitten", "sitting", 3}, {"reasn", "reason", 1},
	} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestConformanceSchema runs Validate with the conformance schema, which $refs
// the policy schema by its $id: the example of docs/cases.md is valid, and a typo in
// a case's policy is reported at its pointer and line.
func TestConformanceSchema(t *testing.T) {
	if !slices.Contains(schema.Names(), "conformance") {
		t.Fatal("no conformance schema embedded")
	}
	src := `policy:
  budget: 3
  tools: { pay: { cost: 1 }, wire: { cost: 1, requires_approval: true } }
cases:
  - name: budget exhausted terminates
    steps:
      - request: { tool: pay, at: 0 }
        expect: { decision: allow, cost: 1, remaining: 2 }
      - request: { tool: wire, id: w1, at: 1.5 }
        expect: { decision: pending, reason: approval_required }
      - approve: { request: w1, by: alice, at: 2 }
        expect: { decision: allow, remaining: 1 }
      - reject: { request: w9, by: alice, at: 2 }
        expect: { error: true }
      - request: { tool: pay, at: 3 }
        expect: { decision: allow, terminated: budget_exhausted }
      - request: { tool: pay, at: 4 }
        expect: { decision: deny, reason: terminated }
    expect_state: { remaining: 0, status: terminated, calls: { pay: 2, wire: 1 } }
  - name: kill switch
    steps:
      - terminate: { by: ops, at: 1 }
        expect: { status: terminated }
      - request: { tool: pay, at: 2 }
        expect: { decision: deny, reason: terminated }
  - name: a typo in the policy is refused
    policy: { budget: 3, tools: {}, scar_limt: 5 }
    expect_compile_error: { path: /scar_limt }
`
	d := mustLoad(t, "case.yaml", src)
	if diags := Validate(d, "conformance"); len(diags) > 0 {
		t.Fatalf("docs/cases.md example: %v", diags)
	}
	bad := strings.Replace(src, "wire: { cost: 1, requires_approval: true }", "wire: { cost: 1, requires_aproval: true }", 1)
	d = mustLoad(t, "case.yaml", bad)
	want := `case.yaml:3:47: /policy/tools/wire/requires_aproval: unknown field "requires_aproval" (did you mean "requires_approval"?) (unknown_field)`
	if diags := Validate(d, "conformance"); len(diags) != 1 || diags[0].String() != want {
		t.Errorf("got %v\nwant %s", diags, want)
	}
}
