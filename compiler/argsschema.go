package compiler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/policy"
)

// draft2020 is the one $schema an argument schema may name.
const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// schemaKeywords are the keywords an argument schema may use: those of JSON
// Schema 2020-12 that OPA's json.match_schema (a draft-07 validator) honours
// with the same meaning, so that the verdict OPA reaches is the one the
// schema states. Anything else is a compile error, never silently ignored:
// D321 (argument schema keywords).
var schemaKeywords = map[string]bool{
	"$schema": true, "$ref": true, "$defs": true, "$comment": true,
	"title": true, "description": true, "default": true, "examples": true,
	"type": true, "enum": true, "const": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true, "exclusiveMinimum": true,
	"maxLength": true, "minLength": true, "pattern": true,
	"items": true, "maxItems": true, "minItems": true, "uniqueItems": true, "contains": true,
	"maxProperties": true, "minProperties": true, "required": true,
	"properties": true, "patternProperties": true, "additionalProperties": true, "propertyNames": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true,
}

// annotations may stand beside $ref: they assert nothing.
var annotations = map[string]bool{"$comment": true, "title": true, "description": true, "default": true, "examples": true}

// checkArgsSchemas checks every rule's args_schema: a valid JSON Schema
// 2020-12 (the project's validator, against the meta-schema), keywords
// within schemaKeywords, local $ref only. Diagnostics name the pointer in
// the policy (/tools/<name>/args_schema/...).
func checkArgsSchemas(n policy.Policy, doc *source.Document) diag.List {
	var diags diag.List
	names := make([]string, 0, len(n.Tools))
	for name := range n.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	check := func(ptr []string, raw json.RawMessage) {
		if raw == nil {
			return
		}
		base := diag.Pointer(append(ptr, "args_schema")...)
		for _, f := range schemaProblems(raw) {
			p := base + f.pointer
			pos := doc.Pos(p)
			if f.key {
				pos = doc.KeyPos(p)
			}
			diags = append(diags, diag.Diagnostic{Code: diag.CodeArgsSchema, Pointer: p, Position: pos, Message: f.message})
		}
	}
	for _, name := range names {
		check([]string{"tools", name}, n.Tools[name].ArgsSchema)
	}
	if n.DefaultRule != nil {
		check([]string{"default_rule"}, n.DefaultRule.ArgsSchema)
	}
	return diags
}

type schemaProblem struct {
	pointer string // within the schema
	message string
	key     bool // the keyword is wrong, not its value: blame the key
}

// schemaProblems lists what is wrong with one argument schema.
func schemaProblems(raw json.RawMessage) []schemaProblem {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []schemaProblem{{"", "internal: " + err.Error(), false}}
	}
	var out []schemaProblem
	walkSchema(v, "", true, &out)
	if len(out) > 0 {
		return out
	}
	jc := jsonschema.NewCompiler()
	jc.Draft = jsonschema.Draft2020
	jc.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("remote schema %s: an argument schema may only refer within itself", u)
	}
	const url = "lineage:args_schema.json"
	if err := jc.AddResource(url, bytes.NewReader(raw)); err != nil {
		return []schemaProblem{{"", err.Error(), false}}
	}
	if _, err := jc.Compile(url); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			leaf := ve
			for len(leaf.Causes) > 0 {
				leaf = leaf.Causes[0]
			}
			return []schemaProblem{{leaf.InstanceLocation, "not a valid JSON Schema 2020-12: " + leaf.Message, false}}
		}
		msg := err.Error()
		var se *jsonschema.SchemaError
		if errors.As(err, &se) && se.Err != nil {
			msg = se.Err.Error()
		}
		return []schemaProblem{{"", "not a valid JSON Schema 2020-12: " + strings.ReplaceAll(msg, url, "args_schema"), false}}
	}
	// The schema is valid 2020-12; OPA's validator, which the runtime runs,
	// must take it too (it refuses some that 2020-12 allows, such as an enum
	// with a value twice): else every call of the tool would fail at run time.
	if msg := opaRefuses(v); msg != "" {
		return []schemaProblem{{"", "OPA's json.match_schema, which decides it, refuses this schema: " + msg, false}}
	}
	return nil
}

// opaRefuses returns why OPA's schema loader (json.verify_schema, the one
// json.match_schema compiles with) refuses the schema v; "" if it does not.
func opaRefuses(v any) string {
	rs, err := rego.New(rego.Query("r := json.verify_schema(input)"), rego.Input(v),
		rego.SetRegoVersion(ast.RegoV1)).Eval(context.Background())
	if err != nil {
		return err.Error()
	}
	if len(rs) != 1 {
		return "no result"
	}
	r, _ := rs[0].Bindings["r"].([]any)
	if len(r) != 2 {
		return "no result"
	}
	if ok, _ := r[0].(bool); ok {
		return ""
	}
	msg, _ := r[1].(string)
	return strings.TrimPrefix(msg, "jsonschema: ")
}

// walkSchema checks the keywords of one schema and of its subschemas.
func walkSchema(v any, ptr string, root bool, out *[]schemaProblem) {
	m, ok := v.(map[string]any)
	if !ok {
		if _, isBool := v.(bool); isBool && !root {
			return // true and false are schemas too
		}
		*out = append(*out, schemaProblem{ptr, "a schema must be an object", false})
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	_, hasRef := m["$ref"]
	for _, k := range keys {
		p := ptr + "/" + diag.Pointer(k)[1:]
		switch {
		case !schemaKeywords[k]:
			*out = append(*out, schemaProblem{p, fmt.Sprintf("keyword %q is not supported in an argument schema (docs/policy.md#argument-schemas lists those that are)", k), true})
			continue
		case k == "$schema":
			if s, _ := m[k].(string); !root || strings.TrimSuffix(s, "#") != draft2020 {
				*out = append(*out, schemaProblem{p, fmt.Sprintf("$schema may only be %q, at the top of the argument schema", draft2020), false})
			}
			continue
		case k == "$ref":
			if s, _ := m[k].(string); !strings.HasPrefix(s, "#") {
				*out = append(*out, schemaProblem{p, fmt.Sprintf("$ref %q is not local: an argument schema may only refer within itself (\"#/$defs/...\")", s), false})
			}
			continue
		case hasRef && !annotations[k]:
			*out = append(*out, schemaProblem{p, fmt.Sprintf("keyword %q beside $ref: put the $ref in an allOf with it", k), true})
			continue
		}
		switch k {
		case "items", "contains", "additionalProperties", "propertyNames", "not", "if", "then", "else":
			walkSchema(m[k], p, false, out)
		case "allOf", "anyOf", "oneOf":
			if xs, ok := m[k].([]any); ok {
				for i, x := range xs {
					walkSchema(x, fmt.Sprintf("%s/%d", p, i), false, out)
				}
			}
		case "properties", "patternProperties", "$defs":
			if xs, ok := m[k].(map[string]any); ok {
				sub := make([]string, 0, len(xs))
				for s := range xs {
					sub = append(sub, s)
				}
				sort.Strings(sub)
				for _, s := range sub {
					walkSchema(xs[s], p+"/"+diag.Pointer(s)[1:], false, out)
				}
			}
		}
	}
}

// hasArgsSchema says whether any rule of n has an argument schema.
func hasArgsSchema(n policy.Policy) bool {
	if n.DefaultRule != nil && n.DefaultRule.ArgsSchema != nil {
		return true
	}
	for _, r := range n.Tools {
		if r.ArgsSchema != nil {
			return true
		}
	}
	return false
}

// ArgsSchemaProblems says why a JSON Schema cannot be a rule's args_schema
// as it is (docs/policy.md#argument-schemas), each problem with its pointer
// within the schema; nil when it can. `lineagec mcp pins` asks it of each
// MCP tool's inputSchema.
func ArgsSchemaProblems(schema json.RawMessage) []string {
	var out []string
	for _, p := range schemaProblems(schema) {
		ptr := p.pointer
		if ptr == "" {
			ptr = "/"
		}
		out = append(out, ptr+": "+p.message)
	}
	return out
}
