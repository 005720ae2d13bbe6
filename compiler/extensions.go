package compiler

import (
	"fmt"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage/internal/diag"
	lineagerego "github.com/lineage-guard/lineage/rego"
)

// extension is one Rego extension module (docs/extensions.md) being compiled.
type extension struct {
	name     string        // module file name: the path it came from, or ext/<i>.rego
	pointer  string        // JSON pointer of the entry's path or source
	pos      diag.Position // position of that node in the policy file
	fromPath bool          // Rego positions are then positions in a file of their own
	source   string
	module   *ast.Module
	// forbidden are its uses of builtins outside the allowlist, reported
	// with OPA's refusal of the module (checkModules).
	forbidden []forbidden
}

// extPrefix is the package every extension must live under.
var extPrefix = ast.MustParseRef("data.lineage.ext")

// forbidden is a use of an OPA builtin outside the allowlist
// (lineagerego.Capabilities): where a module names it.
type forbidden struct {
	name string
	loc  *ast.Location
}

// forbiddenUses lists every reference in m to an OPA builtin that extensions
// may not use: called, named as a `with` value, assigned, anywhere. OPA,
// given the allowlist's capabilities, is what refuses them (checkModules);
// this only names the builtin where OPA's own message would not (an unsafe
// var "http" for `with f as http.send`).
func forbiddenUses(m *ast.Module) []forbidden {
	var out []forbidden
	seen := map[string]bool{}
	ast.WalkTerms(m, func(t *ast.Term) bool {
		ref, ok := t.Value.(ast.Ref)
		if !ok || len(ref) == 0 {
			return false
		}
		if h, ok := ref[0].Value.(ast.Var); !ok || h.Equal(ast.DefaultRootDocument.Value) || h.Equal(ast.InputRootDocument.Value) {
			return false
		}
		for i := len(ref); i > 0; i-- {
			name := ref[:i].String()
			if _, builtin := ast.BuiltinMap[name]; builtin && !lineagerego.AllowedBuiltin(name) {
				if key := fmt.Sprint(name, t.Location); !seen[key] {
					seen[key] = true
					out = append(out, forbidden{name, t.Location})
				}
				break
			}
		}
		return false
	})
	return out
}

// opaCapabilities are the capabilities a compiled policy's modules are
// checked with: the allowlist (lineagerego.Capabilities), lineage.cel, and
// json.match_schema, which the generated module's argument schemas use
// (lineagerego.WithArgsSchemas; extensions may still not: forbiddenUses).
func opaCapabilities() *ast.Capabilities {
	caps := lineagerego.WithArgsSchemas(lineagerego.Capabilities())
	caps.Builtins = append(caps.Builtins, &ast.Builtin{Name: celDecl.Name, Decl: celDecl.Decl})
	return caps
}

// at places a Rego location inside the policy: exactly, for a module read from
// its own file; at the source node with the module position in the message otherwise.
func (e *extension) at(code string, loc *ast.Location, msg string) diag.Diagnostic {
	d := diag.Diagnostic{Code: code, Pointer: e.pointer, Position: e.pos, Message: msg}
	if loc == nil {
		return d
	}
	if e.fromPath {
		d.Position = diag.Position{File: e.name, Line: loc.Row, Col: loc.Col}
	} else {
		d.Message = fmt.Sprintf("%s (module line %d:%d)", msg, loc.Row, loc.Col)
	}
	return d
}

// parseExtension parses one module and checks what can be checked alone: syntax,
// the package, the shape of deny/require_approval; and finds its uses of
// builtins outside the allowlist.
func parseExtension(e *extension) diag.List {
	m, err := ast.ParseModuleWithOpts(e.name, e.source, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return regoErrors(e, diag.CodeRegoParse, err)
	}
	e.module = m
	var out diag.List
	if !m.Package.Path.HasPrefix(extPrefix) || len(m.Package.Path) <= len(extPrefix) {
		out = append(out, e.at(diag.CodeRegoPackage, m.Package.Location,
			fmt.Sprintf("extension package %s must be under lineage.ext (e.g. package lineage.ext.payments)",
				strings.TrimPrefix(m.Package.Path.String(), "data."))))
	}
	for _, r := range m.Rules {
		name := r.Head.Name.String()
		if len(r.Head.Reference) > 0 {
			name = r.Head.Reference[0].Value.String()
		}
		if (name == "deny" || name == "require_approval") && r.Head.RuleKind() != ast.MultiValue {
			out = append(out, e.at(diag.CodeRegoCompile, r.Location,
				fmt.Sprintf("%s must be a set rule (%s contains … if { … })", name, name)))
		}
	}
	e.forbidden = forbiddenUses(m)
	out = append(out, hostTimeUses(e)...)
	sortByModuleLocation(out)
	return out
}

// sortByModuleLocation orders one module's diagnostics by their place in the
// module (they share the policy position of an inline source).
func sortByModuleLocation(ds diag.List) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		ma, mb := moduleLine(a.Message), moduleLine(b.Message)
		if ma[0] != mb[0] {
			return ma[0] < mb[0]
		}
		return ma[1] < mb[1]
	})
}

// moduleLine extracts "(module line R:C)" as a sortable pair.
func moduleLine(msg string) [2]int {
	var r, c int
	if i := strings.LastIndex(msg, "(module line "); i >= 0 {
		fmt.Sscanf(msg[i:], "(module line %d:%d)", &r, &c)
	}
	return [2]int{r, c}
}

// regoErrors turns OPA's errors into diagnostics placed in the policy.
func regoErrors(e *extension, code string, err error) diag.List {
	var out diag.List
	errs, ok := err.(ast.Errors)
	if !ok {
		return diag.List{e.at(code, nil, err.Error())}
	}
	for _, x := range errs {
		out = append(out, e.at(code, x.Location, x.Message))
	}
	return out
}

// definesRule reports whether some module of package pkg defines a rule named name.
func definesRule(exts []*extension, pkg ast.Ref, name string) bool {
	for _, e := range exts {
		if e.module == nil || !e.module.Package.Path.Equal(pkg) {
			continue
		}
		for _, r := range e.module.Rules {
			if ref := r.Head.Ref(); len(ref) > 0 && ref[0].Value.Compare(ast.Var(name)) == 0 {
				return true
			}
		}
	}
	return false
}

// extPackages lists the distinct extension packages, sorted, as refs.
func extPackages(exts []*extension) []ast.Ref {
	seen := map[string]ast.Ref{}
	for _, e := range exts {
		if e.module != nil {
			seen[e.module.Package.Path.String()] = e.module.Package.Path
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]ast.Ref, len(keys))
	for i, k := range keys {
		out[i] = seen[k]
	}
	return out
}

// forbiddenOnLine reports whether loc is on a line where the module names a
// forbidden builtin.
func (e *extension) forbiddenOnLine(loc *ast.Location) bool {
	for _, f := range e.forbidden {
		if loc != nil && f.loc != nil && f.loc.Row == loc.Row {
			return true
		}
	}
	return false
}

// hostTimeUses reports the time builtins a module calls with a zone other
// than "UTC", or a parse layout with a zone abbreviation, written in the
// module (D240 (time builtins in UTC only)). A zone or layout computed at
// run time is refused then (lineagerego's check: extension_error).
func hostTimeUses(e *extension) diag.List {
	var out diag.List
	check := func(op *ast.Term, args []*ast.Term, loc *ast.Location) {
		ref, ok := op.Value.(ast.Ref)
		if !ok {
			return
		}
		for i, a := range args {
			if why := lineagerego.HostTimeUse(ref.String(), i, a.Value); why != "" {
				if a.Location != nil {
					loc = a.Location
				}
				out = append(out, e.at(diag.CodeRegoBuiltin, loc, why))
			}
		}
	}
	ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Expr:
			if x.IsCall() {
				check(x.OperatorTerm(), x.Operands(), x.Location)
			}
		case ast.Call:
			if len(x) > 0 {
				check(x[0], x[1:], x[0].Location)
			}
		}
		return false
	}).Walk(e.module)
	return out
}
