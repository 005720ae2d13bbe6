package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("not a JSON object: %v", err)
	}
	return doc
}

// compiler returns a compiler holding every embedded schema under its $id, so
// that one schema may $ref another; it never loads anything from outside.
func compiler(t *testing.T) (*jsonschema.Compiler, map[string]string) {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("refusing to load %s: not embedded", u)
	}
	ids := map[string]string{}
	for _, name := range Names() {
		b, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := decode(t, b)["$id"].(string)
		if id == "" {
			t.Fatalf("%s: no $id", name)
		}
		if err := c.AddResource(id, bytes.NewReader(b)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ids[name] = id
	}
	return c, ids
}

func TestSchemasCompile(t *testing.T) {
	names := Names()
	if len(names) == 0 || names[0] == "" {
		t.Fatalf("Names() = %q", names)
	}
	hasPolicy := false
	for _, n := range names {
		hasPolicy = hasPolicy || n == "policy"
	}
	if !hasPolicy {
		t.Fatalf("Names() = %q, want policy among them", names)
	}
	c, ids := compiler(t)
	want := map[string]string{"policy": PolicyID, "conformance": ConformanceID}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			b, err := Get(name)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(b) {
				t.Fatal("not valid JSON")
			}
			doc := decode(t, b)
			if s, _ := doc["$schema"].(string); s != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %q, want draft 2020-12", s)
			}
			if w, ok := want[name]; ok && ids[name] != w {
				t.Errorf("$id = %q, want %q", ids[name], w)
			}
			if _, err := c.Compile(ids[name]); err != nil {
				t.Fatalf("does not compile: %#v", err)
			}
		})
	}
}

func TestGet(t *testing.T) {
	for _, bad := range []string{"", "nope", "../schema", "policy.schema", "policy/x"} {
		if _, err := Get(bad); err == nil {
			t.Errorf("Get(%q): no error", bad)
		}
	}
	b, err := Get("policy")
	if err != nil || !bytes.Contains(b, []byte(PolicyID)) {
		t.Fatalf("Get(policy) = %.40q, %v", b, err)
	}
}

// TestPolicySchemaStyle pins the house rules of the policy schema: every property
// documented for editors, every object closed, every integer JSON-safe.
func TestPolicySchemaStyle(t *testing.T) {
	b, err := Get("policy")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s/%d", path, i), e)
			}
		case map[string]any:
			if props, ok := x["properties"].(map[string]any); ok {
				for name, p := range props {
					ps, _ := p.(map[string]any)
					for _, k := range []string{"title", "description"} {
						if s, _ := ps[k].(string); strings.TrimSpace(s) == "" {
							t.Errorf("%s/properties/%s: no %s", path, name, k)
						}
					}
				}
				if ap, ok := x["additionalProperties"]; !ok || ap != false {
					t.Errorf("%s: additionalProperties is %v, want false", path, ap)
				}
			}
			if types(x["type"])["integer"] {
				if m, _ := x["maximum"].(json.Number); m != "9007199254740991" {
					t.Errorf("%s: integer without maximum 9007199254740991", path)
				}
				if _, ok := x["minimum"]; !ok {
					t.Errorf("%s: integer without minimum", path)
				}
			}
			for k, e := range x {
				walk(path+"/"+k, e)
			}
		}
	}
	walk("#", decode(t, b))
}

func types(v any) map[string]bool {
	out := map[string]bool{}
	switch x := v.(type) {
	case string:
		out[x] = true
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

// TestPolicySchemaExamples checks a few instances against the compiled schema.
func TestPolicySchemaExamples(t *testing.T) {
	c, _ := compiler(t)
	s, err := c.Compile(PolicyID)
	if err != nil {
		t.Fatal(err)
	}
	good := []string{
		`{"budget": 0, "tools": {}}`,
		`{"$schema": "x", "name": "n", "description": "d", "budget": 25000, "scar_limit": 10,
		  "rate_limit": {"max_actions": 60, "window_secs": 60},
		  "tools": {"llm_turn": {"cost": 0, "max_calls": 60}, "pay:v1/x-y.z": {"cost": 1, "requires_approval": true,
		    "when": [{"expr": "args.amount <= 5000", "reason": "amount_over_limit", "scar": "severe"}], "description": "d"}},
		  "default_rule": null, "scar_weights": {"minor": 1, "moderate": 2, "severe": 3},
		  "rego": [{"path": "x.rego"}, {"source": "package lineage.ext.x"}]}`,
		`{"budget": 1, "tools": {}, "default_rule": {"cost": 2}, "rate_limit": null}`,
		`{"budget": 9007199254740991, "tools": {}}`,
		`{"budget": 1.0, "tools": {}}`,
	}
	bad := []string{
		`{"tools": {}}`,
		`{"budget": 1}`,
		`{"budget": -1, "tools": {}}`,
		`{"budget": 1.5, "tools": {}}`,
		`{"budget": 9007199254740992, "tools": {}}`,
		`{"budget": 1, "tools": {}, "scar_limt": 3}`,
		`{"budget": 1, "tools": {"-x": {"cost": 1}}}`,
		`{"budget": 1, "tools": {"x": {}}}`,
		`{"budget": 1, "tools": {"x": {"cost": 1, "max_calls": 0}}}`,
		`{"budget": 1, "tools": {}, "scar_limit": 0}`,
		`{"budget": 1, "tools": {}, "rate_limit": {"max_actions": 1}}`,
		`{"budget": 1, "tools": {}, "rate_limit": {"max_actions": 1, "window_secs": 0}}`,
		`{"budget": 1, "tools": {}, "scar_weights": {"minor": 1, "moderate": 2}}`,
		`{"budget": 1, "tools": {}, "rego": [{"path": "a", "source": "b"}]}`,
		`{"budget": 1, "tools": {}, "rego": [{}]}`,
		`{"budget": 1, "tools": {}, "rego": [{"path": ""}]}`,
		`{"budget": 1, "tools": {"x": {"cost": 1, "when": [{"expr": "true"}]}}}`,
		`{"budget": 1, "tools": {"x": {"cost": 1, "when": [{"expr": "true", "reason": "Bad"}]}}}`,
		`{"budget": 1, "tools": {"x": {"cost": 1, "when": [{"expr": "true", "reason": "ok", "scar": "fatal"}]}}}`,
		`{"budget": 1, "tools": {}, "default_rule": "deny"}`,
	}
	for _, in := range good {
		if err := s.Validate(decodeAny(t, in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
	for _, in := range bad {
		if err := s.Validate(decodeAny(t, in)); err == nil {
			t.Errorf("%s: valid, want an error", in)
		}
	}
}

func decodeAny(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
