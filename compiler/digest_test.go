package compiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
)

// The base policy of the determinism tests, in its shortest spelling.
const basePolicy = `
budget: 25000
rate_limit: {max_actions: 60, window_secs: 60}
tools:
  llm_turn: {cost: 0, max_calls: 60}
  pay_invoice:
    cost: 1
    requires_approval: true
    max_calls: 10
    when:
      - {expr: "args.amount <= 5000", reason: amount_over_limit}
  read_invoice: {cost: 0}
`

// TestDigestSpellings: every spelling of one policy has one digest and one
// canonical document (docs/policy.md, D16 (normalization)).
func TestDigestSpellings(t *testing.T) {
	spellings := map[string]string{
		"yaml": basePolicy,
		"json": `{"budget": 25000, "rate_limit": {"max_actions": 60, "window_secs": 60},
			"tools": {"llm_turn": {"cost": 0, "max_calls": 60},
			"pay_invoice": {"cost": 1, "requires_approval": true, "max_calls": 10,
				"when": [{"expr": "args.amount <= 5000", "reason": "amount_over_limit"}]},
			"read_invoice": {"cost": 0}}}`,
		"other key order": `
tools:
  read_invoice: {cost: 0}
  pay_invoice:
    when:
      - {reason: amount_over_limit, expr: "args.amount <= 5000"}
    max_calls: 10
    requires_approval: true
    cost: 1
  llm_turn: {max_calls: 60, cost: 0}
rate_limit: {window_secs: 60, max_actions: 60}
budget: 25000
`,
		"defaults spelled out": `
budget: 25000
scar_limit: 10
rate_limit: {max_actions: 60, window_secs: 60}
tools:
  llm_turn: {cost: 0, max_calls: 60, requires_approval: false, when: []}
  pay_invoice:
    cost: 1
    requires_approval: true
    max_calls: 10
    when:
      - {expr: "args.amount <= 5000", reason: amount_over_limit, scar: moderate}
  read_invoice: {cost: 0, requires_approval: false, when: []}
default_rule: null
scar_weights: {minor: 1, moderate: 3, severe: 10}
rego: []
`,
		"json defaults spelled out": `{"budget": 25000, "scar_limit": 10, "default_rule": null, "rego": [],
			"scar_weights": {"minor": 1, "moderate": 3, "severe": 10},
			"rate_limit": {"max_actions": 60, "window_secs": 60},
			"tools": {"llm_turn": {"cost": 0, "max_calls": 60, "requires_approval": false, "when": []},
			"pay_invoice": {"cost": 1, "requires_approval": true, "max_calls": 10,
				"when": [{"expr": "args.amount <= 5000", "reason": "amount_over_limit", "scar": "moderate"}]},
			"read_invoice": {"cost": 0, "requires_approval": false, "when": []}}}`,
		"$schema": "$schema: ../../schema/policy.schema.json\n" + basePolicy,
		"json $schema": `{"$schema": "https://github.com/lineage-guard/lineage/schema/policy.schema.json",
			"budget": 25000, "rate_limit": {"max_actions": 60, "window_secs": 60},
			"tools": {"llm_turn": {"cost": 0, "max_calls": 60},
			"pay_invoice": {"cost": 1, "requires_approval": true, "max_calls": 10,
				"when": [{"expr": "args.amount <= 5000", "reason": "amount_over_limit"}]},
			"read_invoice": {"cost": 0}}}`,
		"1.0 for 1": `{"budget": 25000.0, "rate_limit": {"max_actions": 6e1, "window_secs": 60.00},
			"tools": {"llm_turn": {"cost": 0.0, "max_calls": 60},
			"pay_invoice": {"cost": 1.0, "requires_approval": true, "max_calls": 1e1,
				"when": [{"expr": "args.amount <= 5000", "reason": "amount_over_limit"}]},
			"read_invoice": {"cost": -0.0}}}`,
		"yaml 1.0 for 1":  strings.NewReplacer("cost: 1\n", "cost: 1.0\n", "budget: 25000", "budget: 25_000").Replace(basePolicy),
		"yaml flow style": "# YAML, though it looks like JSON\n" + `{budget: 25000, rate_limit: {max_actions: 60, window_secs: 60}, tools: {llm_turn: {cost: 0, max_calls: 60}, pay_invoice: {cost: 1, requires_approval: true, max_calls: 10, when: [{expr: "args.amount <= 5000", reason: amount_over_limit}]}, read_invoice: {cost: 0}}}`,
	}
	spellings["yaml anchors"] = `
budget: 25000
rate_limit: {max_actions: &sixty 60, window_secs: *sixty}
tools:
  llm_turn: {cost: &zero 0, max_calls: *sixty}
  pay_invoice:
    cost: 1
    requires_approval: true
    max_calls: 10
    when: [{expr: "args.amount <= 5000", reason: amount_over_limit}]
  read_invoice: {cost: *zero}
`
	base := mustCompile(t, "base.yaml", basePolicy)
	var wantDoc map[string]any
	if err := json.Unmarshal(base.Document, &wantDoc); err != nil {
		t.Fatal(err)
	}
	for name, src := range spellings {
		t.Run(name, func(t *testing.T) {
			c := mustCompile(t, "p", src)
			if c.Digest != base.Digest || !bytes.Equal(c.Document, base.Document) {
				t.Errorf("digest %s, want %s\ndocument: %s\nwant:     %s", c.Digest, base.Digest, c.Document, base.Document)
			}
			if !reflect.DeepEqual(c.Policy, base.Policy) {
				t.Errorf("normalized policy differs:\n%+v\n%+v", c.Policy, base.Policy)
			}
			if policyModule(t, c) != policyModule(t, base) {
				t.Errorf("generated module differs")
			}
		})
	}
	// The canonical document is RFC 8785: sorted keys, no whitespace, every default.
	for _, key := range []string{`"scar_limit":10`, `"default_rule":null`, `"rego":[]`, `"scar":"moderate"`,
		`"scar_weights":{"minor":1,"moderate":3,"severe":10}`, `"requires_approval":false`, `"when":[]`} {
		if !bytes.Contains(base.Document, []byte(key)) {
			t.Errorf("canonical document lacks %s: %s", key, base.Document)
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, base.Document); err != nil || !bytes.Equal(compact.Bytes(), base.Document) {
		t.Errorf("canonical document is not compact JSON (%v): %s", err, base.Document)
	}
	if bytes.Contains(base.Document, []byte("$schema")) {
		t.Errorf("canonical document keeps $schema: %s", base.Document)
	}
	if bytes.Contains(base.Document, []byte(`"max_calls":null`)) {
		t.Errorf("max_calls spelled out as null (D16 leaves it out): %s", base.Document)
	}
}

// TestDigestChanges: changing any single value changes the digest.
func TestDigestChanges(t *testing.T) {
	full := func() map[string]any {
		var m map[string]any
		src := `{"name": "n", "description": "d", "budget": 100, "scar_limit": 10,
			"rate_limit": {"max_actions": 5, "window_secs": 60},
			"tools": {"a": {"cost": 1, "max_calls": 3, "requires_approval": false, "description": "da",
				"when": [{"expr": "args.x < 5", "reason": "r", "scar": "minor"}]}},
			"default_rule": {"cost": 2, "requires_approval": false, "when": []},
			"scar_weights": {"minor": 1, "moderate": 3, "severe": 10},
			"rego": [{"source": "package lineage.ext.a\n"}]}`
		if err := json.Unmarshal([]byte(src), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	compileMap := func(t *testing.T, m map[string]any) string {
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return mustCompile(t, "", string(raw)).Digest
	}
	set := func(path string, v any) func(map[string]any) {
		return func(m map[string]any) {
			toks := strings.Split(path, "/")
			var cur any = m
			for _, tok := range toks[:len(toks)-1] {
				switch x := cur.(type) {
				case map[string]any:
					cur = x[tok]
				case []any:
					var i int
					fmt.Sscan(tok, &i)
					cur = x[i]
				}
			}
			last := toks[len(toks)-1]
			switch x := cur.(type) {
			case map[string]any:
				if v == nil {
					delete(x, last)
				} else {
					x[last] = v
				}
			case []any:
				var i int
				fmt.Sscan(last, &i)
				x[i] = v
			}
		}
	}
	changes := map[string]func(map[string]any){
		"name":                        set("name", "m"),
		"no name":                     set("name", nil),
		"description":                 set("description", "e"),
		"budget":                      set("budget", 101),
		"scar_limit":                  set("scar_limit", 11),
		"max_actions":                 set("rate_limit/max_actions", 6),
		"window_secs":                 set("rate_limit/window_secs", 61),
		"no rate_limit":               set("rate_limit", nil),
		"cost":                        set("tools/a/cost", 0),
		"max_calls":                   set("tools/a/max_calls", 4),
		"no max_calls":                set("tools/a/max_calls", nil),
		"requires_approval":           set("tools/a/requires_approval", true),
		"tool description":            set("tools/a/description", "db"),
		"expr":                        set("tools/a/when/0/expr", "args.x < 6"),
		"reason":                      set("tools/a/when/0/reason", "s"),
		"scar":                        set("tools/a/when/0/scar", "severe"),
		"scar default":                set("tools/a/when/0/scar", nil),
		"no when":                     set("tools/a/when", []any{}),
		"tool name":                   func(m map[string]any) { tt := m["tools"].(map[string]any); tt["b"] = tt["a"]; delete(tt, "a") },
		"another tool":                set("tools/b", map[string]any{"cost": 0}),
		"no tools":                    set("tools", map[string]any{}),
		"default cost":                set("default_rule/cost", 3),
		"default approval":            set("default_rule/requires_approval", true),
		"no default_rule":             set("default_rule", nil),
		"minor":                       set("scar_weights/minor", 2),
		"moderate":                    set("scar_weights/moderate", 4),
		"severe":                      set("scar_weights/severe", 11),
		"rego source":                 set("rego/0/source", "package lineage.ext.b\n"),
		"rego source whitespace":      set("rego/0/source", "package lineage.ext.a\n\n"),
		"no rego":                     set("rego", []any{}),
		"two rego":                    set("rego", []any{map[string]any{"source": "package lineage.ext.a\n"}, map[string]any{"source": "package lineage.ext.a\n"}}),
		"default_rule when":           set("default_rule/when", []any{map[string]any{"expr": "true", "reason": "r"}}),
		"constraint order (two when)": set("tools/a/when", []any{map[string]any{"expr": "true", "reason": "q"}, map[string]any{"expr": "args.x < 5", "reason": "r", "scar": "minor"}}),
	}
	base := compileMap(t, full())
	seen := map[string]string{base: "base"}
	names := make([]string, 0, len(changes))
	for name := range changes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := full()
		changes[name](m)
		d := compileMap(t, m)
		if other, ok := seen[d]; ok {
			t.Errorf("%s: same digest as %s (%s)", name, other, d)
		}
		seen[d] = name
	}
}

// TestCompileRepeatable: the same input compiled 50 times (concurrently) gives
// one digest, one document and byte-identical modules.
func TestCompileRepeatable(t *testing.T) {
	src := readFile(t, filepath.Join("testdata", "golden", "cel_constraints", "policy.yaml")) +
		"rego:\n  - source: |\n      package lineage.ext.b\n      deny contains {\"reason\": \"b\"} if input.request.tool == \"x\"\n" +
		"  - source: |\n      package lineage.ext.a\n      deny contains {\"reason\": \"a\"} if input.request.tool == \"y\"\n"
	first := mustCompile(t, "", src)
	const n = 50
	var wg sync.WaitGroup
	results := make([]*policy.Compiled, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = compiler.Compile("", []byte(src))
		}()
	}
	wg.Wait()
	for i, c := range results {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		if c.Digest != first.Digest || !bytes.Equal(c.Document, first.Document) {
			t.Fatalf("run %d: digest %s, want %s", i, c.Digest, first.Digest)
		}
		if !reflect.DeepEqual(moduleNames(c), moduleNames(first)) {
			t.Fatalf("run %d: modules %v, want %v", i, moduleNames(c), moduleNames(first))
		}
		for j, m := range c.Modules {
			if m.Source != first.Modules[j].Source {
				t.Fatalf("run %d: module %s differs:\n%s\nwant:\n%s", i, m.Name, m.Source, first.Modules[j].Source)
			}
		}
	}
}

// TestBuilderEqualsYAML: a policy built in Go has the digest and document of
// the same policy written in YAML.
func TestBuilderEqualsYAML(t *testing.T) {
	ext := "package lineage.ext.transfers\n\ndeny contains {\"reason\": \"new_account\", \"scar\": \"severe\"} if {\n\tinput.request.args.account_age_days < 30\n}\n"
	for _, tc := range []struct {
		name  string
		built policy.Policy
		yaml  string
	}{
		{
			name: "product note",
			built: policy.New(25_000).
				Allow("llm_turn", policy.Cost(0).WithMaxCalls(60)).
				Allow("read_invoice", policy.Cost(0)).
				Allow("pay_invoice", policy.Cost(1).WithApproval().WithMaxCalls(10)).
				RateLimit(60, 60).
				ScarLimit(10).
				Policy(),
			yaml: readFile(t, filepath.Join("testdata", "golden", "invoice", "policy.yaml")),
		},
		{
			name: "constraints, default rule, extension",
			built: policy.New(1000).
				Name("payments").
				Allow("pay", policy.Cost(5).
					WithConstraint("args.amount <= 100", "amount_over_limit", "").
					WithConstraint("args.currency == \"EUR\"", "currency", "minor")).
				Allow("read", policy.Cost(0)).
				DefaultRule(policy.Cost(2).WithMaxCalls(3).WithConstraint("!tool.startsWith(\"admin.\")", "admin_tool", "severe")).
				ScarWeights(2, 4, 8).
				Rego(ext).
				Policy(),
			yaml: `
name: payments
budget: 1000
tools:
  read: {cost: 0}
  pay:
    cost: 5
    when:
      - {expr: args.amount <= 100, reason: amount_over_limit}
      - {expr: 'args.currency == "EUR"', reason: currency, scar: minor}
default_rule:
  cost: 2
  max_calls: 3
  when: [{expr: '!tool.startsWith("admin.")', reason: admin_tool, scar: severe}]
scar_weights: {minor: 2, moderate: 4, severe: 8}
rego:
  - source: |
      package lineage.ext.transfers

      deny contains {"reason": "new_account", "scar": "severe"} if {
      	input.request.args.account_age_days < 30
      }
`,
		},
		{
			name:  "empty",
			built: policy.Policy{Budget: 0},
			yaml:  "budget: 0\ntools: {}\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := compiler.CompilePolicy(tc.built)
			if err != nil {
				t.Fatalf("CompilePolicy: %v", err)
			}
			y := mustCompile(t, "p.yaml", tc.yaml)
			if b.Digest != y.Digest || !bytes.Equal(b.Document, y.Document) {
				t.Errorf("builder %s\n  %s\nYAML %s\n  %s", b.Digest, b.Document, y.Digest, y.Document)
			}
			if !reflect.DeepEqual(b.Policy, y.Policy) {
				t.Errorf("normalized policies differ:\n%+v\n%+v", b.Policy, y.Policy)
			}
			if policyModule(t, b) != policyModule(t, y) {
				t.Errorf("generated modules differ")
			}
		})
	}
}

// TestRecompileDocument: the normalized document compiles to itself, which is
// what the runtime relies on when it reopens an agent from its policy record.
func TestRecompileDocument(t *testing.T) {
	var files []string
	files = append(files, goldenCases(t)...)
	for _, pat := range []string{"*.yaml", "*.json"} {
		f, _ := filepath.Glob(filepath.Join("testdata", "valid", pat))
		files = append(files, f...)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			c, err := compiler.CompileFile(f)
			if err != nil {
				t.Fatalf("compile:\n%v", err)
			}
			again, err := compiler.Compile("", c.Document)
			if err != nil {
				t.Fatalf("recompiling the normalized document:\n%v\n%s", err, c.Document)
			}
			if again.Digest != c.Digest || !bytes.Equal(again.Document, c.Document) {
				t.Errorf("recompiled to %s, want %s", again.Digest, c.Digest)
			}
			if policyModule(t, again) != policyModule(t, c) {
				t.Errorf("recompiled module differs")
			}
		})
	}
}
