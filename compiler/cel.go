package compiler

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	opatypes "github.com/open-policy-agent/opa/v1/types"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/diag"
)

// celBuiltin is the Rego builtin through which generated rules ask cel-go whether
// constraint i holds for the input: lineage.cel(i, input) is true only when the
// expression evaluates to exactly true (false and errors violate: fail closed).
const celBuiltin = "lineage.cel"

// celCostLimit bounds the work one expression may do on one request; an
// expression over it fails (and so violates), it never stalls the guard.
const celCostLimit = 1_000_000

// CELFunction declares the builtin lineage.cel, for tools that run lineage's
// Rego outside a compiled policy (the Rego test runner).
var CELFunction = celDecl

var celDecl = &rego.Function{
	Name:        celBuiltin,
	Description: "Evaluates the policy's CEL constraint number i against the input; true only if it holds.",
	Decl:        opatypes.NewFunction(opatypes.Args(opatypes.N, opatypes.A), opatypes.B),
}

func celEnv() (*cel.Env, error) {
	return cel.NewEnv(
		celStateType(),
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("state", cel.ObjectType(celStateTypeName)),
		cel.Variable("now", cel.TimestampType),
		cel.CrossTypeNumericComparisons(true),
	)
}

// celStateTypeName is how CEL names lineage.CELState (package.Type).
const celStateTypeName = "lineage.CELState"

// celStateType declares lineage.CELState as a CEL object type whose fields
// are its cel tags (what cel-go's ext.NativeTypes does, without the rest of
// ext): the checker then knows state's fields and their types (docs/policy.md#cel-constraints).
func celStateType() cel.EnvOption {
	return func(env *cel.Env) (*cel.Env, error) {
		p, a, err := types.ComposeTypes(env.CELTypeProvider(), env.CELTypeAdapter(),
			reflect.TypeFor[lineage.CELState](), types.ParseStructTags(true))
		if err != nil {
			return nil, err
		}
		if env, err = cel.CustomTypeAdapter(a)(env); err != nil {
			return nil, err
		}
		return cel.CustomTypeProvider(p)(env)
	}
}

// compileCEL parses and type-checks an expression, and names the variables
// it reads. A syntax error, an unknown variable or a non-bool result is a
// diagnostic at ptr.
// pos is where the expression's text starts in the file; blockCol, for a YAML
// block scalar, the column its lines start at.
func compileCEL(env *cel.Env, expr, ptr string, pos diag.Position, blockCol int) (cel.Program, map[string]bool, diag.List) {
	parsed, iss := env.Parse(expr)
	if iss.Err() != nil {
		return nil, nil, celIssues(diag.CodeCELSyntax, iss, ptr, pos, blockCol)
	}
	checked, iss := env.Check(parsed)
	if iss.Err() != nil {
		return nil, nil, celIssues(diag.CodeCELType, iss, ptr, pos, blockCol)
	}
	// dyn is accepted: `args.approved` may well be a bool; at run time anything
	// that is not exactly true violates the constraint.
	if t := checked.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, nil, diag.List{{Code: diag.CodeCELType, Pointer: ptr, Position: pos,
			Message: fmt.Sprintf("CEL expression must be of type bool, not %s", t)}}
	}
	prg, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(celCostLimit))
	if err != nil {
		return nil, nil, diag.List{{Code: diag.CodeCELType, Pointer: ptr, Position: pos, Message: err.Error()}}
	}
	// The variables the checker resolved: what the runtime must put in the input.
	vars := map[string]bool{}
	for _, ref := range checked.NativeRep().ReferenceMap() {
		if len(ref.OverloadIDs) == 0 && ref.Name != "" {
			vars[ref.Name] = true
		}
	}
	return prg, vars, nil
}

func celIssues(code string, iss *cel.Issues, ptr string, pos diag.Position, blockCol int) diag.List {
	var out diag.List
	for _, e := range iss.Errors() {
		d := diag.Diagnostic{Code: code, Pointer: ptr, Position: pos}
		loc := e.Location
		msg := e.Message
		if loc != nil && loc.Line() > 0 {
			msg = fmt.Sprintf("CEL %s at expression %d:%d", msg, loc.Line(), loc.Column()+1)
			// Point at the character inside the file: exact for plain and quoted
			// scalars on one line (without escapes) and for block scalars.
			switch {
			case d.Line == 0:
			case blockCol > 0:
				d.Line += loc.Line() - 1
				d.Col = blockCol + loc.Column()
			case loc.Line() == 1:
				d.Col += loc.Column()
			default:
				d.Line += loc.Line() - 1
				d.Col = loc.Column() + 1
			}
		} else {
			msg = "CEL " + msg
		}
		d.Message = msg
		out = append(out, d)
	}
	return out
}

// celOption returns the rego option that registers lineage.cel bound to this
// policy's programs. Each compiled policy gets its own closure, so two policies
// never see each other's expressions.
func celOption(progs []cel.Program) func(*rego.Rego) {
	return rego.Function2(celDecl, func(_ rego.BuiltinContext, idx, input *ast.Term) (*ast.Term, error) {
		return ast.BooleanTerm(celHolds(progs, idx, input)), nil
	})
}

func celHolds(progs []cel.Program, idx, input *ast.Term) bool {
	n, ok := idx.Value.(ast.Number)
	if !ok {
		return false
	}
	i, ok := n.Int()
	if !ok || i < 0 || i >= len(progs) {
		return false
	}
	in, ok := input.Value.(ast.Object)
	if !ok {
		return false
	}
	req, _ := value(in.Get(ast.InternedTerm("request"))).(ast.Object)
	if req == nil {
		return false
	}
	out, _, err := progs[i].Eval(&celActivation{in: in, req: req})
	if err != nil {
		return false
	}
	b, ok := out.Value().(bool)
	return ok && b
}

// celActivation gives an expression its variables (tool, args, state, now),
// each converted from the Rego input only if the expression reads it: most
// read args alone. A variable the input lacks or holds malformed is not
// found, so the expression errs and the constraint fails closed.
type celActivation struct {
	in  ast.Object
	req ast.Object
	// cel-go asks for a variable each time the expression reads it (in a
	// comprehension, once per element): each is converted once and kept.
	resolved [len(celVars)]resolvedVar
}

// celVars are the variables of celEnv, in the order of celActivation.resolved.
var celVars = [...]string{"tool", "args", "state", "now"}

type resolvedVar struct {
	done, ok bool
	v        any
}

func (a *celActivation) ResolveName(name string) (any, bool) {
	for i, n := range celVars {
		if n == name {
			r := &a.resolved[i]
			if !r.done {
				r.v, r.ok = a.resolve(name)
				r.done = true
			}
			return r.v, r.ok
		}
	}
	return nil, false
}

func (a *celActivation) resolve(name string) (any, bool) {
	switch name {
	case "tool":
		tool, ok := value(a.req.Get(ast.InternedTerm("tool"))).(ast.String)
		return string(tool), ok
	case "args":
		args, ok := value(a.req.Get(ast.InternedTerm("args"))).(ast.Object)
		if !ok {
			return nil, false
		}
		v, err := celValue(ast.NewTerm(args))
		return v, err == nil
	case "state":
		st, ok := value(a.in.Get(ast.InternedTerm("state"))).(ast.Object)
		if !ok {
			return nil, false
		}
		return celStateOf(st)
	case "now":
		atNs, ok := value(a.req.Get(ast.InternedTerm("at_ns"))).(ast.Number)
		if !ok {
			return nil, false
		}
		ns, ok := atNs.Int64()
		if !ok {
			return nil, false
		}
		return time.Unix(0, ns).UTC(), true
	}
	return nil, false
}

func (a *celActivation) Parent() interpreter.Activation { return nil }

// celStateOf reads input.state as the typed state; a field missing or not an
// int64 leaves state unresolved, so the expression errs: fail closed.
func celStateOf(st ast.Object) (*lineage.CELState, bool) {
	num := func(key string) (int64, bool) {
		n, ok := value(st.Get(ast.InternedTerm(key))).(ast.Number)
		if !ok {
			return 0, false
		}
		return n.Int64()
	}
	var s lineage.CELState
	var ok [4]bool
	s.Budget, ok[0] = num("budget")
	s.Spent, ok[1] = num("spent")
	s.Remaining, ok[2] = num("remaining")
	s.ScarScore, ok[3] = num("scar_score")
	calls, isObj := value(st.Get(ast.InternedTerm("calls"))).(ast.Object)
	if ok != [4]bool{true, true, true, true} || !isObj {
		return nil, false
	}
	s.Calls = make(map[string]int64, calls.Len())
	err := calls.Iter(func(k, v *ast.Term) error {
		name, isStr := k.Value.(ast.String)
		n, isNum := v.Value.(ast.Number)
		c, isInt := n.Int64()
		if !isStr || !isNum || !isInt {
			return fmt.Errorf("bad calls entry")
		}
		s.Calls[string(name)] = c
		return nil
	})
	return &s, err == nil
}

// value is t's value, nil for a missing term: a malformed input fails closed.
func value(t *ast.Term) ast.Value {
	if t == nil {
		return nil
	}
	return t.Value
}

// celValue converts a Rego value into what CEL expects of JSON: integral numbers
// are int64, other numbers float64 (docs/policy.md#cel-constraints), objects map[string]any.
func celValue(t *ast.Term) (any, error) {
	if t == nil {
		return nil, nil
	}
	switch v := t.Value.(type) {
	case ast.Null:
		return nil, nil
	case ast.Boolean:
		return bool(v), nil
	case ast.String:
		return string(v), nil
	case ast.Number:
		return celNumber(json.Number(v))
	case *ast.Array:
		out := make([]any, 0, v.Len())
		var err error
		v.Foreach(func(e *ast.Term) {
			if err != nil {
				return
			}
			var x any
			x, err = celValue(e)
			out = append(out, x)
		})
		return out, err
	case ast.Object:
		out := make(map[string]any, v.Len())
		err := v.Iter(func(k, e *ast.Term) error {
			ks, ok := k.Value.(ast.String)
			if !ok {
				return fmt.Errorf("non-string key %v", k)
			}
			x, err := celValue(e)
			out[string(ks)] = x
			return err
		})
		return out, err
	case ast.Set:
		return nil, fmt.Errorf("sets are not JSON")
	default:
		return nil, fmt.Errorf("unexpected value %T", t.Value)
	}
}

func celNumber(n json.Number) (any, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	return strconv.ParseFloat(s, 64)
}
