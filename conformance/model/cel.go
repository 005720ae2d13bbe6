package model

import (
	"fmt"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// celEnv is the CEL environment of SPEC §5: the standard library plus four
// variables, with int/double comparisons allowed at type-check time (cel-go's
// runtime already orders and equates int and double values by number).
type celEnv struct{ env *cel.Env }

func newCELEnv() (*celEnv, error) {
	env, err := cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("state", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("now", cel.TimestampType),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		return nil, err
	}
	return &celEnv{env: env}, nil
}

// constraint is one compiled `when` entry.
type constraint struct {
	expr     string
	reason   string
	severity lineage.Severity // "" for scar none (D5)
	prg      cel.Program
}

// compile type-checks and plans one constraint; ptr is its JSON pointer.
//
// Choice: SPEC §5 says an expression must be of type bool. The model accepts
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
// type mismatch, an overflow, ...) are violations: fail closed (SPEC §5).
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
	calls := make(map[string]any, len(m.calls))
	for k, n := range m.calls {
		calls[k] = n
	}
	return map[string]any{
		"tool": tool,
		"args": celValue(args),
		"state": map[string]any{
			"budget":     m.budget,
			"spent":      m.spent,
			"remaining":  m.remaining(),
			"scar_score": m.scarScore,
			"calls":      calls,
		},
		"now": t.UTC(),
	}
}
