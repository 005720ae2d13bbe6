package model

import (
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// celEnv is the CEL environment of docs/policy.md#cel-constraints: the standard library plus four
// variables, with int/double comparisons allowed at type-check time (cel-go's
// runtime already orders and equates int and double values by number).
type celEnv struct{ env *cel.Env }

func newCELEnv() (*celEnv, error) {
	env, err := cel.NewEnv(
		// state is an object with typed fields (docs/policy.md#cel-constraints): lineage.CELState,
		// whose cel tags name the fields.
		func(env *cel.Env) (*cel.Env, error) {
			p, a, err := types.ComposeTypes(env.CELTypeProvider(), env.CELTypeAdapter(),
				reflect.TypeFor[lineage.CELState](), types.ParseStructTags(true))
			if err != nil {
				return nil, err
			}
			return cel.Lib(typesLib{p, a})(env)
		},
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("state", cel.ObjectType("lineage.CELState")),
		cel.Variable("now", cel.TimestampType),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		return nil, err
	}
	return &celEnv{env: env}, nil
}

// typesLib installs a composed type provider and adapter.
type typesLib struct {
	p types.Provider
	a types.Adapter
}

func (l typesLib) CompileOptions() []cel.EnvOption {
	return []cel.EnvOption{cel.CustomTypeProvider(l.p), cel.CustomTypeAdapter(l.a)}
}

func (typesLib) ProgramOptions() []cel.ProgramOption { return nil }

// constraint is one compiled `when` entry.
type constraint struct {
	expr     string
	reason   string
	severity lineage.Severity // "" for scar none (D5: scar none)
	prg      cel.Program
}

// compile type-checks and plans one constraint; ptr is its JSON pointer.
//
// Choice: docs/policy.md#cel-constraints says an expression must be of type bool. The model accepts
// bool and also dyn (e.g. `args.flag`, whose type is only known at run time),
// where a non-bool result at run time is simply a violation; any other static
// type (`tool`, `1 + 2`) is refused.
func (e *celEnv) compile(ptr string, c policy.Constraint) (*constraint, error) {
	var sev lineage.Severity
	switch c.Scar {
	case "none":
	case string(lineage.Minor), string(lineage.Moderate), string(lineage.Severe):
		sev = lineage.Severity(c.Scar)
	default:
		return nil, fmt.Errorf("model: %s/scar: %q is not none, minor, moderate or severe (is the policy normalized?)", ptr, c.Scar)
	}
	ast, iss := e.env.Compile(c.Expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("model: %s/expr: %v", ptr, iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("model: %s/expr: type is %s, want bool", ptr, t)
	}
	prg, err := e.env.Program(ast)
	if err != nil {
		return nil, fmt.Errorf("model: %s/expr: %v", ptr, err)
	}
	return &constraint{expr: c.Expr, reason: c.Reason, severity: sev, prg: prg}, nil
}

// holds evaluates the constraint: it holds only when the result is exactly the
// bool true. false, any other value and an evaluation error (a missing arg, a
// type mismatch, an overflow, ...) are violations: fail closed (docs/policy.md#cel-constraints).
func (c *constraint) holds(vars map[string]any) bool {
	out, _, err := c.prg.Eval(vars)
	if err != nil || out == nil {
		return false
	}
	b, ok := out.(types.Bool)
	return ok && bool(b)
}

// celVars is the activation for a constraint evaluated for tool and args at
// time t against the current state.
func (m *Model) celVars(tool string, args map[string]any, t time.Time) map[string]any {
	return map[string]any{
		"tool": tool,
		"args": celValue(args),
		"state": &lineage.CELState{
			Budget:    m.budget,
			Spent:     m.spent,
			Remaining: m.remaining(),
			ScarScore: m.scarScore,
			Calls:     maps.Clone(m.calls),
		},
		"now": t.UTC(),
	}
}
