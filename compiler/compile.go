package compiler

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/cel-go/cel"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/policy"
	lineagerego "github.com/lineage-guard/lineage/rego"
)

// PolicyModule is the name of the generated module in a compiled policy.
const PolicyModule = "policy.rego"

// CompileFile reads and compiles a policy file; extension paths in it resolve
// against the file's directory. The error, if any, is a diag.List.
func CompileFile(path string) (*policy.Compiled, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, diag.List{{Code: diag.CodeIO, Position: diag.Position{File: path}, Message: err.Error()}}
	}
	return Compile(path, data)
}

// Compile compiles a policy given as JSON or YAML bytes; file names it in
// diagnostics and locates extension paths ("" for none: the working directory).
func Compile(file string, data []byte) (*policy.Compiled, error) {
	doc, diags := source.Load(file, data)
	if len(diags) > 0 {
		return nil, diags
	}
	dir := "."
	if file != "" {
		dir = filepath.Dir(file)
	}
	return CompileDocument(doc, dir)
}

// CompileRecorded compiles a normalized policy document read from record 1 of a
// log (the runtime's Options.Compile). It is Compile but for one default: an
// absent max_pending is a policy recorded before the field existed and keeps no
// limit, so the document compiles to the digest it was recorded with (D260 (policies recorded before max_pending keep no limit)
// (policies recorded before max_pending keep no limit)).
func CompileRecorded(doc []byte) (*policy.Compiled, error) {
	d, diags := source.Load("", doc)
	if len(diags) > 0 {
		return nil, diags
	}
	return compileDocument(d, ".", true)
}

// CompilePolicy compiles a policy built in Go (see policy.New). It yields the
// same normalized document and digest as the same policy written in YAML.
func CompilePolicy(p policy.Policy) (*policy.Compiled, error) {
	raw, err := marshalForCompile(p)
	if err != nil {
		return nil, diag.List{{Code: diag.CodeSchema, Message: err.Error()}}
	}
	return Compile("", raw)
}

// CompileDocument compiles an already loaded document (a policy file, or a
// policy embedded in a conformance case file: positions point into that file).
func CompileDocument(doc *source.Document, dir string) (*policy.Compiled, error) {
	return compileDocument(doc, dir, false)
}

func compileDocument(doc *source.Document, dir string, recorded bool) (*policy.Compiled, error) {
	if diags := source.Validate(doc, "policy"); len(diags) > 0 {
		return nil, diags
	}
	p, err := decodePolicy(doc.Value)
	if err != nil {
		// The schema admitted something the Go types cannot hold: a bug of ours.
		return nil, diag.List{{Code: diag.CodeSchema, Position: doc.Pos(""), Message: "internal: " + err.Error()}}
	}

	var diags diag.List
	exts := make([]*extension, len(p.Rego))
	for i, m := range p.Rego {
		e := &extension{name: fmt.Sprintf("ext/%d.rego", i), source: m.Source}
		if m.Path != "" {
			e.pointer = diag.Pointer("rego", fmt.Sprint(i), "path")
			e.pos = doc.Pos(e.pointer)
			path := m.Path
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			src, err := readExtension(path)
			if err != nil {
				diags = append(diags, diag.Diagnostic{Code: diag.CodeIO, Pointer: e.pointer, Position: e.pos,
					Message: fmt.Sprintf("cannot read extension: %v", err)})
				continue
			}
			e.name, e.fromPath, e.source = path, true, string(src)
			p.Rego[i] = policy.RegoModule{Source: e.source}
		} else {
			e.pointer = diag.Pointer("rego", fmt.Sprint(i), "source")
			e.pos = doc.Pos(e.pointer)
		}
		exts[i] = e
		diags = append(diags, parseExtension(e)...)
	}

	n := normalize(p, recorded)
	progs, celReadsState, celDiags := compileConstraints(n, doc)
	diags = append(diags, celDiags...)
	diags = append(diags, checkArgsSchemas(n, doc)...)
	if len(diags) > 0 {
		// Report every problem: if every extension parsed into its package, OPA
		// can still check them (type errors, unknown functions) alongside the rest.
		if extensionsParsed(exts, diags) {
			probe := &policy.Compiled{Query: lineagerego.Query, RejectQuery: lineagerego.RejectQuery}
			probe.Modules = modulesOf(n, "sha256:unchecked", exts)
			diags = append(diags, checkModules(probe, exts)...)
		}
		diags.Sort()
		return nil, diags
	}

	canon, digest, err := canonical(n)
	if err != nil {
		return nil, diag.List{{Code: diag.CodeSchema, Message: "internal: " + err.Error()}}
	}
	if len(canon) > source.MaxBytes {
		// The runtime recompiles record 1 when it reopens an agent; a document
		// the loader would refuse then must be refused now.
		return nil, diag.List{{Code: diag.CodeTooLarge, Position: doc.Pos(""),
			Message: fmt.Sprintf("the normalized policy (extensions inlined) is %d bytes, over the limit of %d", len(canon), source.MaxBytes)}}
	}
	c := &policy.Compiled{
		Digest:      digest,
		Document:    canon,
		Policy:      n,
		Query:       lineagerego.Query,
		RejectQuery: lineagerego.RejectQuery,
	}
	c.Modules = modulesOf(n, digest, exts)
	if len(exts) > 0 {
		c.Rules = make(map[string]json.RawMessage, len(n.Tools))
		for name, r := range n.Tools {
			c.Rules[name] = ruleInput(r)
		}
		if n.DefaultRule != nil {
			c.DefaultRule = ruleInput(*n.DefaultRule)
		}
	}
	c.Reads = policy.InputReads{Args: len(progs) > 0 || hasArgsSchema(n), State: celReadsState, All: len(exts) > 0}
	if len(progs) > 0 {
		c.Options = []func(*rego.Rego){celOption(progs)}
	}
	if diags := checkModules(c, exts); len(diags) > 0 {
		return nil, diags
	}
	return c, nil
}

func extensionsParsed(exts []*extension, diags diag.List) bool {
	for _, e := range exts {
		if e == nil || e.module == nil {
			return false
		}
	}
	for _, d := range diags {
		if d.Code == diag.CodeRegoPackage || d.Code == diag.CodeIO {
			return false
		}
	}
	return true
}

// modulesOf lists a compiled policy's modules: library, generated policy, extensions.
func modulesOf(n policy.Policy, digest string, exts []*extension) []lineagerego.Module {
	mods := lineagerego.Library()
	mods = append(mods, lineagerego.Module{Name: PolicyModule, Source: generate(n, digest, exts)})
	for i, e := range exts {
		mods = append(mods, lineagerego.Module{Name: fmt.Sprintf("ext/%d.rego", i), Source: e.source})
	}
	return mods
}

// readExtension reads an extension file: a regular file within the size limit
// (a path such as /dev/zero must not hang the compiler).
func readExtension(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if info.Size() > source.MaxBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d", path, info.Size(), source.MaxBytes)
	}
	return io.ReadAll(io.LimitReader(f, source.MaxBytes+1))
}

// compileConstraints type-checks every `when` expression, in the order the
// generated Rego numbers them: tools by name, then the default rule; and
// reports whether any of them reads the state variable.
func compileConstraints(n policy.Policy, doc *source.Document) (progs []cel.Program, readsState bool, diags diag.List) {
	type rule struct {
		ptr  []string
		rule policy.ToolRule
	}
	var rules []rule
	names := make([]string, 0, len(n.Tools))
	for name := range n.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rules = append(rules, rule{[]string{"tools", name}, n.Tools[name]})
	}
	if n.DefaultRule != nil {
		rules = append(rules, rule{[]string{"default_rule"}, *n.DefaultRule})
	}
	var env *cel.Env
	for _, r := range rules {
		for i, c := range r.rule.When {
			if env == nil {
				var err error
				if env, err = celEnv(); err != nil {
					return nil, false, diag.List{{Code: diag.CodeCELType, Message: "internal: " + err.Error()}}
				}
			}
			ptr := diag.Pointer(append(r.ptr, "when", fmt.Sprint(i), "expr")...)
			text, blockCol := doc.TextPos(ptr)
			prg, vars, ds := compileCEL(env, c.Expr, ptr, text, blockCol)
			diags = append(diags, ds...)
			progs = append(progs, prg)
			readsState = readsState || vars["state"]
		}
	}
	return progs, readsState, diags
}

// checkModules compiles all modules together with OPA, as the runtime will, so
// that type errors and unknown references in extensions surface now.
func checkModules(c *policy.Compiled, exts []*extension) diag.List {
	parsed := make(map[string]*ast.Module, len(c.Modules))
	byName := map[string]*extension{}
	for i, e := range exts {
		byName[fmt.Sprintf("ext/%d.rego", i)] = e
	}
	var diags diag.List
	for _, m := range c.Modules {
		if e := byName[m.Name]; e != nil && e.module != nil {
			parsed[m.Name] = e.module
			continue
		}
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			diags = append(diags, diag.Diagnostic{Code: diag.CodeRegoCompile, Message: "internal: generated Rego does not parse: " + err.Error()})
			continue
		}
		parsed[m.Name] = mod
	}
	if len(diags) > 0 {
		return diags
	}
	// OPA compiles with the allowlist's capabilities (docs/extensions.md): it refuses
	// every route to another builtin. lineage.cel is the generated Rego's own.
	// No error limit: the extensions are the user's, bounded in size, and
	// each error should be reported where it is ("error limit reached" has
	// no place).
	comp := ast.NewCompiler().WithCapabilities(opaCapabilities()).SetErrorLimit(0)
	comp.Compile(parsed)
	reported := map[*extension]bool{}
	for _, err := range comp.Errors {
		file := ""
		if err.Location != nil {
			file = err.Location.File
		}
		// The location's file is the module's name: ext/<i>.rego or the path it was read from.
		var owner *extension
		for i, e := range exts {
			if file == fmt.Sprintf("ext/%d.rego", i) || (e.fromPath && file == e.name) {
				owner = e
			}
		}
		if owner == nil {
			diags = append(diags, diag.Diagnostic{Code: diag.CodeRegoCompile, Message: "internal: generated Rego: " + err.Error()})
			continue
		}
		// OPA refused the module: name the builtins it may not use, in place
		// of OPA's errors on their lines ("undefined function http.send",
		// "var http is unsafe").
		if !reported[owner] {
			reported[owner] = true
			for _, f := range owner.forbidden {
				diags = append(diags, owner.at(diag.CodeRegoBuiltin, f.loc,
					fmt.Sprintf("builtin %s is not allowed in extensions: only deterministic, pure builtins are, so that replaying a log reproduces its verdicts", f.name)))
			}
		}
		if owner.forbiddenOnLine(err.Location) {
			continue
		}
		diags = append(diags, owner.at(diag.CodeRegoCompile, err.Location, err.Message))
	}
	// json.match_schema is in the capabilities for the generated module's
	// argument schemas: OPA does not refuse an extension that uses it, the
	// allowlist does. In the compiled module local variables are renamed, so
	// a reference json.match_schema left there is the builtin.
	for i, e := range exts {
		m := comp.Modules[fmt.Sprintf("ext/%d.rego", i)]
		if e == nil || reported[e] || m == nil {
			continue
		}
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if ref, ok := t.Value.(ast.Ref); ok && ref.Equal(ast.JSONMatchSchema.Ref()) {
				diags = append(diags, e.at(diag.CodeRegoBuiltin, t.Location,
					"builtin json.match_schema is not allowed in extensions: only deterministic, pure builtins are, so that replaying a log reproduces its verdicts (a rule's args_schema is the way to check the args' shape)"))
			}
			return false
		})
	}
	if len(diags) == 0 {
		c.Compiler = comp // the runtime prepares its queries on it (D61: compiled once)
	}
	diags.Sort()
	return diags
}

// marshalForCompile writes a Go-built policy as the JSON a user would write.
func marshalForCompile(p policy.Policy) ([]byte, error) {
	if p.Tools == nil {
		p.Tools = map[string]policy.ToolRule{}
	}
	return json.Marshal(p)
}
