package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/schema"
)

// compiled is one schema, compiled, with the raw JSON of every embedded schema
// (by $id) to read keywords the validator's messages leave out.
type compiled struct {
	schema *jsonschema.Schema
	raw    map[string]any
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*compileResult{}
)

type compileResult struct {
	c   *compiled
	err error
}

// load compiles the named schema once per process.
func load(name string) (*compiled, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if r, ok := cache[name]; ok {
		return r.c, r.err
	}
	c, err := compileSchema(name)
	cache[name] = &compileResult{c, err}
	return c, err
}

func compileSchema(name string) (*compiled, error) {
	if _, err := schema.Get(name); err != nil {
		return nil, err
	}
	jc := jsonschema.NewCompiler()
	jc.Draft = jsonschema.Draft2020
	jc.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("schema %s is not embedded in lineage", u)
	}
	c := &compiled{raw: map[string]any{}}
	target := ""
	// Every embedded schema is added so that one may $ref another by its $id.
	for _, n := range schema.Names() {
		b, err := schema.Get(n)
		if err != nil {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			if n == name {
				return nil, fmt.Errorf("schema %s: %v", n, err)
			}
			continue
		}
		id, _ := mapOf(doc)["$id"].(string)
		if id == "" {
			id = "https://github.com/lineage-guard/lineage/schema/" + n + ".schema.json"
		}
		if err := jc.AddResource(id, bytes.NewReader(b)); err != nil {
			if n == name {
				return nil, fmt.Errorf("schema %s: %v", n, err)
			}
			continue
		}
		c.raw[strings.TrimSuffix(id, "#")] = doc
		if n == name {
			target = id
		}
	}
	s, err := jc.Compile(target)
	if err != nil {
		return nil, err
	}
	c.schema = s
	return c, nil
}

// Validate checks d against the named embedded schema ("policy",
// "conformance") and reports every violation with the JSON pointer and the
// position of the offending value (of the key, for an unknown field), sorted.
// A Document whose Load failed validates to nothing: its diagnostics were
// already reported. The number problems LoadDeferring kept come first; a
// schema finding at the same pointer (about the 0 that stands there) is not
// reported.
func Validate(d *Document, schemaName string) (diags diag.List) {
	if d == nil || d.failed {
		return nil
	}
	if len(d.deferred) > 0 {
		defer func() {
			at := map[string]bool{}
			for _, x := range d.deferred {
				at[x.Pointer] = true
			}
			out := append(diag.List{}, d.deferred...)
			for _, x := range diags {
				if !at[x.Pointer] {
					out = append(out, x)
				}
			}
			diags = out
		}()
	}
	defer func() {
		if r := recover(); r != nil {
			// Defence in depth: the validator must not take the process down.
			diags = diag.List{{Code: diag.CodeSchema, Position: d.Pos(""),
				Message: fmt.Sprintf("cannot validate document (internal error: %v)", r)}}
		}
	}()
	c, err := load(schemaName)
	if err != nil {
		return diag.List{{Code: diag.CodeSchema, Position: diag.Position{File: d.File},
			Message: fmt.Sprintf("cannot load schema %q: %v", schemaName, err)}}
	}
	err = c.schema.Validate(d.Value)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return diag.List{{Code: diag.CodeSchema, Position: d.Pos(""), Message: err.Error()}}
	}
	v := &validation{d: d, c: c}
	fs := v.walk(ve)
	out := make(diag.List, 0, len(fs))
	for _, f := range fs {
		out = append(out, f.Diagnostic)
	}
	if len(out) == 0 { // never report nothing for an invalid document
		out = append(out, diag.Diagnostic{Code: diag.CodeSchema, Position: d.Pos(""), Message: ve.Error()})
	}
	out = dedupe(out)
	// The validator walks maps in random order: make ties deterministic.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Message < out[j].Message })
	out.Sort()
	return out
}

type validation struct {
	d *Document
	c *compiled
}

// finding is a diagnostic plus what the oneOf/anyOf ranking needs.
type finding struct {
	diag.Diagnostic
	keyword  string   // schema keyword that failed
	loc      string   // instance location (JSON pointer)
	expected []string // for type errors: the types the schema wanted
}

// walk flattens a validation error into findings, one per leaf; for oneOf and
// anyOf it keeps only the branch that best explains the failure.
func (v *validation) walk(e *jsonschema.ValidationError) []finding {
	kw := lastToken(e.KeywordLocation)
	if len(e.Causes) > 0 && (e.Message == "oneOf failed" || e.Message == "anyOf failed") {
		return v.alternatives(e)
	}
	if len(e.Causes) > 0 && kw != "minContains" {
		var out []finding
		for _, c := range e.Causes {
			out = append(out, v.walk(c)...)
		}
		return out
	}
	return v.leaf(e, kw)
}

// alternatives picks what to report when no branch of a oneOf/anyOf matched.
func (v *validation) alternatives(e *jsonschema.ValidationError) []finding {
	loc := instancePointer(e.InstanceLocation)
	type branch struct {
		fs       []finding
		mismatch bool // the value is not even of this branch's type
		depth    int
	}
	var all, cands []branch
	for _, c := range e.Causes {
		b := branch{fs: v.walk(c)}
		for _, f := range b.fs {
			if f.keyword == "type" && f.loc == loc {
				b.mismatch = true
			}
			b.depth = max(b.depth, strings.Count(f.Pointer, "/"))
		}
		all = append(all, b)
		if !b.mismatch && len(b.fs) > 0 {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		// Wrong type for every branch: one type error naming all the types.
		var types []string
		seen := map[string]bool{}
		for _, b := range all {
			for _, f := range b.fs {
				if f.keyword == "type" && f.loc == loc {
					for _, t := range f.expected {
						if !seen[t] {
							seen[t] = true
							types = append(types, t)
						}
					}
				}
			}
		}
		if len(types) == 0 {
			return []finding{v.generic(e)}
		}
		return []finding{v.typeFinding(loc, types)}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if len(cands[i].fs) != len(cands[j].fs) {
			return len(cands[i].fs) < len(cands[j].fs)
		}
		return cands[i].depth > cands[j].depth
	})
	best := cands[0]
	tied := 1
	for tied < len(cands) && len(cands[tied].fs) == len(best.fs) && cands[tied].depth == best.depth {
		tied++
	}
	if tied > 1 {
		// Equally good explanations that only disagree about which members an
		// object should have ({path} or {source}): say what the choices are.
		shapeOnly := true
		for _, b := range cands[:tied] {
			for _, f := range b.fs {
				if (f.Code != diag.CodeUnknownField && f.Code != diag.CodeRequired) || (parent(f.Pointer) != loc && f.Pointer != loc) {
					shapeOnly = false
				}
			}
		}
		if names := v.branchRequired(e); shapeOnly && names != nil {
			quantity := "exactly one" // oneOf
			if e.Message == "anyOf failed" {
				quantity = "at least one"
			}
			return []finding{{
				Diagnostic: diag.Diagnostic{Code: diag.CodeSchema, Pointer: loc, Position: v.d.Pos(loc),
					Message: "must have " + quantity + " of " + strings.Join(names, " or ")},
				keyword: "oneOf", loc: loc,
			}}
		}
	}
	return best.fs
}

// branchRequired returns, for a oneOf whose every branch requires exactly one
// property, those properties (quoted); else nil.
func (v *validation) branchRequired(e *jsonschema.ValidationError) []string {
	branches, ok := v.raw(e.AbsoluteKeywordLocation).([]any)
	if !ok {
		return nil
	}
	var names []string
	for _, b := range branches {
		req, _ := v.deref(e.AbsoluteKeywordLocation, b)["required"].([]any)
		if len(req) != 1 {
			return nil
		}
		s, _ := req[0].(string)
		names = append(names, fmt.Sprintf("%q", s))
	}
	return names
}

// requiredAlternatives describes a schema that only requires members
// ({"required": [a]} or {"anyOf": [{"required": [a]}, {"required": [b]}]}) as
// the quoted names; nil for anything else.
func requiredAlternatives(s map[string]any) []string {
	only := func(m map[string]any) ([]string, bool) {
		req, ok := m["required"].([]any)
		if !ok || len(m) != 1 {
			return nil, false
		}
		var out []string
		for _, r := range req {
			name, ok := r.(string)
			if !ok {
				return nil, false
			}
			out = append(out, fmt.Sprintf("%q", name))
		}
		return out, len(out) == 1
	}
	if names, ok := only(s); ok {
		return names
	}
	alts, ok := s["anyOf"].([]any)
	if !ok || len(s) != 1 {
		return nil
	}
	var out []string
	for _, a := range alts {
		names, ok := only(mapOf(a))
		if !ok {
			return nil
		}
		out = append(out, names...)
	}
	return out
}

// deref follows a local "$ref" of a raw schema object, relative to the schema
// document of location.
func (v *validation) deref(location string, s any) map[string]any {
	m := mapOf(s)
	for i := 0; i < 10; i++ {
		ref, ok := m["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return m
		}
		base, _, _ := strings.Cut(location, "#")
		m = mapOf(v.raw(base + ref))
	}
	return m
}

func (v *validation) generic(e *jsonschema.ValidationError) finding {
	loc := instancePointer(e.InstanceLocation)
	return finding{Diagnostic: diag.Diagnostic{Code: diag.CodeSchema, Pointer: loc, Position: v.d.Pos(loc), Message: e.Message},
		keyword: lastToken(e.KeywordLocation), loc: loc}
}

func (v *validation) typeFinding(loc string, types []string) finding {
	val, _ := lookup(v.d.Value, loc)
	return finding{
		Diagnostic: diag.Diagnostic{Code: diag.CodeType, Pointer: loc, Position: v.d.Pos(loc),
			Message: fmt.Sprintf("expected %s, got %s", strings.Join(types, " or "), describe(val))},
		keyword: "type", loc: loc, expected: types,
	}
}

var typeMessage = regexp.MustCompile(`^expected (.*), but got \w+$`)

// leaf turns one failed keyword into findings.
func (v *validation) leaf(e *jsonschema.ValidationError, kw string) []finding {
	loc := instancePointer(e.InstanceLocation)
	d := v.d
	val, _ := lookup(d.Value, loc)
	mk := func(code, ptr string, pos diag.Position, msg string) finding {
		return finding{Diagnostic: diag.Diagnostic{Code: code, Pointer: ptr, Position: pos, Message: msg}, keyword: kw, loc: loc}
	}
	kwVal := v.raw(e.AbsoluteKeywordLocation)

	// A property name failing propertyNames is blamed on the key.
	if depth, ok := ownerDepth(e.KeywordLocation); ok {
		toks := pointerTokens(loc)
		owner, name := loc, ""
		if depth < len(toks) {
			owner = "/" + strings.Join(toks[:depth], "/")
			if depth == 0 {
				owner = ""
			}
			name = unescapeToken(toks[depth])
		}
		ptr := owner + "/" + escapeToken(name)
		what := "name"
		if i := strings.LastIndex(e.AbsoluteKeywordLocation, "/propertyNames"); i >= 0 {
			if t, _ := mapOf(v.raw(e.AbsoluteKeywordLocation[:i+len("/propertyNames")]))["title"].(string); t != "" {
				what = strings.ToLower(t)
			}
		}
		msg := e.Message
		if kw == "pattern" {
			if p, ok := kwVal.(string); ok {
				msg = "must match " + p
			}
		}
		return []finding{{Diagnostic: diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr, Position: d.KeyPos(ptr),
			Message: fmt.Sprintf("invalid %s %s: %s", what, quote(name), msg)}, keyword: kw, loc: ptr}}
	}

	switch kw {
	case "additionalProperties", "unevaluatedProperties":
		if kw == "unevaluatedProperties" && loc != "" {
			// Reported at the member itself.
			name := unescapeToken(lastToken(loc))
			return []finding{mk(diag.CodeUnknownField, loc, d.KeyPos(loc), fmt.Sprintf("unknown field %s", quote(name)))}
		}
		obj, ok := val.(map[string]any)
		parentSchema := mapOf(v.raw(parentLocation(e.AbsoluteKeywordLocation)))
		known := propertyNames(parentSchema)
		var out []finding
		if ok {
			for _, name := range slices.Sorted(maps.Keys(obj)) {
				if _, isKnown := known[name]; isKnown || matchesPattern(parentSchema, name) {
					continue
				}
				ptr := loc + "/" + escapeToken(name)
				msg := fmt.Sprintf("unknown field %s", quote(name))
				if s := suggest(name, known); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				out = append(out, mk(diag.CodeUnknownField, ptr, d.KeyPos(ptr), msg))
			}
		}
		if len(out) == 0 {
			out = append(out, mk(diag.CodeUnknownField, loc, d.Pos(loc), e.Message))
		}
		return out
	case "required":
		req, _ := kwVal.([]any)
		obj, _ := val.(map[string]any)
		var out []finding
		for _, r := range req {
			name, _ := r.(string)
			if _, ok := obj[name]; !ok {
				out = append(out, mk(diag.CodeRequired, loc, d.KeyPos(loc), fmt.Sprintf("missing required field %s", quote(name))))
			}
		}
		if len(out) == 0 {
			out = append(out, mk(diag.CodeRequired, loc, d.KeyPos(loc), e.Message))
		}
		return out
	case "type":
		if m := typeMessage.FindStringSubmatch(e.Message); m != nil {
			f := v.typeFinding(loc, strings.Split(m[1], " or "))
			return []finding{f}
		}
		return []finding{mk(diag.CodeType, loc, d.Pos(loc), e.Message)}
	}

	msg := e.Message
	switch kw {
	case "minimum":
		msg = fmt.Sprintf("must be >= %v, got %s", kwVal, describeShort(val))
	case "maximum":
		msg = fmt.Sprintf("must be <= %v, got %s", kwVal, describeShort(val))
	case "exclusiveMinimum":
		msg = fmt.Sprintf("must be > %v, got %s", kwVal, describeShort(val))
	case "exclusiveMaximum":
		msg = fmt.Sprintf("must be < %v, got %s", kwVal, describeShort(val))
	case "minLength":
		if n, ok := kwVal.(json.Number); ok && n == "1" {
			msg = "must not be empty"
		} else {
			msg = fmt.Sprintf("must be at least %v characters long", kwVal)
		}
	case "maxLength":
		msg = fmt.Sprintf("must be at most %v characters long", kwVal)
	case "pattern":
		if p, ok := kwVal.(string); ok {
			msg = fmt.Sprintf("must match %s, got %s", p, describeShort(val))
		}
	case "enum":
		if opts, ok := kwVal.([]any); ok {
			var parts []string
			for _, o := range opts {
				b, _ := json.Marshal(o)
				parts = append(parts, string(b))
			}
			msg = fmt.Sprintf("must be one of %s, got %s", strings.Join(parts, ", "), describeShort(val))
		}
	case "not":
		if names := requiredAlternatives(v.deref(e.AbsoluteKeywordLocation, kwVal)); names != nil {
			msg = "must not have " + strings.Join(names, " or ")
		}
	case "minContains":
		contains := v.deref(e.AbsoluteKeywordLocation, v.raw(parentLocation(e.AbsoluteKeywordLocation)+"/contains"))
		if names := requiredAlternatives(contains); len(names) == 1 {
			msg = "at least one item must have " + names[0]
		} else {
			msg = strings.Replace(e.Message, "valid must be", "the number of matching items must be", 1)
		}
	case "const":
		if b, err := json.Marshal(kwVal); err == nil {
			msg = fmt.Sprintf("must be %s, got %s", b, describeShort(val))
		}
	}
	return []finding{mk(diag.CodeSchema, loc, d.Pos(loc), msg)}
}

// raw returns the raw schema JSON at an absolute keyword location ("<$id>#/ptr").
func (v *validation) raw(location string) any {
	base, frag, _ := strings.Cut(location, "#")
	doc, ok := v.c.raw[base]
	if !ok {
		return nil
	}
	if frag == "" {
		return doc
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if t, err := url.PathUnescape(tok); err == nil {
			tok = t
		}
		tok = unescapeToken(tok)
		switch x := doc.(type) {
		case map[string]any:
			doc = x[tok]
		case []any:
			i := 0
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil
			}
			doc = x[i]
		default:
			return nil
		}
	}
	return doc
}

// parent of an absolute keyword location: drop the keyword.
func parentLocation(location string) string {
	base, frag, _ := strings.Cut(location, "#")
	return base + "#" + parent(frag)
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func propertyNames(s map[string]any) map[string]struct{} {
	out := map[string]struct{}{}
	for k := range mapOf(s["properties"]) {
		out[k] = struct{}{}
	}
	return out
}

func matchesPattern(s map[string]any, name string) bool {
	for p := range mapOf(s["patternProperties"]) {
		if re, err := regexp.Compile(p); err == nil && re.MatchString(name) {
			return true
		}
	}
	return false
}

// instancePointer converts the validator's instance location (tokens escaped
// for JSON pointers and then for URL paths) into a plain JSON pointer.
func instancePointer(loc string) string {
	if loc == "" || !strings.Contains(loc, "%") {
		return loc
	}
	toks := strings.Split(loc, "/")
	for i, t := range toks {
		if u, err := url.PathUnescape(t); err == nil {
			toks[i] = u
		}
	}
	return strings.Join(toks, "/")
}

// ownerDepth reports, for a keyword location that passes through
// "propertyNames", how many instance tokens lead to the object whose property
// names are checked. The validator drops an empty name from the instance
// location, so this is the only way to tell {"": …} from its owner.
func ownerDepth(keywordLocation string) (int, bool) {
	toks := strings.Split(strings.TrimPrefix(keywordLocation, "/"), "/")
	depth := 0
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "propertyNames":
			return depth, true
		case "properties", "patternProperties", "prefixItems", "items":
			if toks[i] != "items" || i+1 < len(toks) && isIndex(toks[i+1]) {
				i++ // the member name or index in the schema
			}
			depth++
		case "additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems", "contains":
			depth++
		case "allOf", "anyOf", "oneOf", "dependentSchemas", "dependencies":
			i++ // index or name: no instance token
		}
	}
	return 0, false
}

func isIndex(s string) bool {
	return s != "" && allDigits(s)
}

// pointerTokens splits a JSON pointer into its (still escaped) tokens.
func pointerTokens(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

func lastToken(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// describe renders a JSON value for "got …" in messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case json.Number:
		return "number " + abbreviate(string(x), 40)
	case string:
		return "string " + quote(x)
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// describeShort renders a scalar as written, anything else by its type.
func describeShort(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprint(x)
	case json.Number:
		return abbreviate(string(x), 40)
	case string:
		return quote(x)
	}
	return describe(v)
}

// suggest returns the known name closest to name, if it is within edit
// distance 2 (and closer than the length of name), else "".
func suggest(name string, known map[string]struct{}) string {
	if len(name) > 80 {
		return ""
	}
	best, bestD := "", 3
	for k := range known {
		d := editDistance(strings.ToLower(name), strings.ToLower(k))
		if d == 0 && name != k {
			d = 1 // differs only in case
		}
		if d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	if best == "" || bestD >= len([]rune(name)) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent characters.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
