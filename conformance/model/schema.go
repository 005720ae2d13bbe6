package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// compileArgsSchema compiles a rule's args_schema as docs/policy.md describes
// it: a JSON Schema 2020-12 object that refers only within itself. The model
// validates with the JSON Schema library itself, not with the Rego the
// compiler generates (OPA's json.match_schema): it is the independent copy.
//
// Choice: the model takes any 2020-12 schema; which keywords the compiler
// admits is the compiler's check (a policy the compiler refuses never reaches
// a runtime to be compared with).
func compileArgsSchema(ptr string, raw json.RawMessage) (*jsonschema.Schema, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("model: %s: %v", ptr, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("model: %s: an argument schema must be an object", ptr)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("%s: remote $ref %s: an argument schema refers only within itself", ptr, u)
	}
	const url = "model:args_schema.json"
	if err := c.AddResource(url, bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("model: %s: %v", ptr, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %v", ptr, err)
	}
	return s, nil
}
