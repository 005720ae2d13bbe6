package schema

import (
	"fmt"
	"strings"
	"testing"
)

// TestPolicySchemaFieldExamples: every field with a lower bound, a minimum
// length or a pattern carries examples, and each example (and each default)
// is valid against that field's own schema. Editors insert the first example
// on completion; without one they insert 0 or "", which such a field refuses.
func TestPolicySchemaFieldExamples(t *testing.T) {
	b, err := Get("policy")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := compiler(t)
	seen := 0
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch x := v.(type) {
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s/%d", ptr, i), e)
			}
		case map[string]any:
			_, min := x["minimum"]
			_, minLen := x["minLength"]
			_, pattern := x["pattern"]
			if min || minLen || pattern {
				seen++
				examples, _ := x["examples"].([]any)
				if len(examples) == 0 {
					t.Errorf("%s: a bounded field without examples", ptr)
				}
				s, err := c.Compile(PolicyID + "#" + ptr)
				if err != nil {
					t.Fatalf("%s: %v", ptr, err)
				}
				if d, ok := x["default"]; ok {
					examples = append(examples, d)
				}
				for _, e := range examples {
					if err := s.Validate(e); err != nil {
						t.Errorf("%s: example or default %v is invalid: %v", ptr, e, err)
					}
				}
			}
			for k, e := range x {
				walk(ptr+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), e)
			}
		}
	}
	walk("", decode(t, b))
	if seen < 9 {
		t.Errorf("found %d bounded fields, want at least the 9 integer fields", seen)
	}
}

// TestServeSchemaFieldExamples: every field of the serve configuration
// carries examples, and each example and default is valid against the
// field's own schema (a wrong default or example would mislead an editor).
func TestServeSchemaFieldExamples(t *testing.T) {
	b, err := Get("serve")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := compiler(t)
	props, _ := decode(t, b)["properties"].(map[string]any)
	if len(props) < 10 {
		t.Fatalf("serve schema has %d properties", len(props))
	}
	for name, v := range props {
		x, _ := v.(map[string]any)
		examples, _ := x["examples"].([]any)
		if len(examples) == 0 {
			t.Errorf("%s: no examples", name)
		}
		s, err := c.Compile(ServeID + "#/properties/" + strings.ReplaceAll(name, "~", "~0"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d, ok := x["default"]; ok {
			examples = append(examples, d)
		}
		for _, e := range examples {
			if err := s.Validate(e); err != nil {
				t.Errorf("%s: example or default %v is invalid: %v", name, e, err)
			}
		}
	}
}
