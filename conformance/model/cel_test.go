package model

import (
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// TestTypedState: state's fields are typed in the model's CEL too (docs/policy.md#cel-constraints).
func TestTypedState(t *testing.T) {
	for _, expr := range []string{"state.remainin > 3", "state.remaining > 'ten'", "state.calls.x == 'y'", "state['budget'] > 1"} {
		p := policy.Policy{Budget: 1, Tools: map[string]policy.ToolRule{"t": {Cost: 0, When: []policy.Constraint{{Expr: expr, Reason: "r", Scar: "minor"}}}}}
		lim, w := int64(10), policy.ScarWeights{Minor: 1, Moderate: 3, Severe: 10}
		p.ScarLimit, p.ScarWeights = &lim, &w
		if _, err := New("agt", p, genesis); err == nil {
			t.Errorf("%s: the model compiled it", expr)
		}
	}
	m := newModel(t, policy.Policy{Budget: 5, Tools: map[string]policy.ToolRule{
		"t": {Cost: 1, When: []policy.Constraint{{Expr: "state.remaining == 5 - ('t' in state.calls ? state.calls.t : 0)", Reason: "r", Scar: "minor"}}}}})
	for i := 1; i <= 2; i++ {
		if v, err := m.Request(lineage.Request{Tool: "t", At: at(float64(i))}); err != nil || v.Decision != lineage.Allow {
			t.Fatalf("request %d: %+v, %v", i, v, err)
		}
	}
}
