package model

import (
	"errors"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// TestNamesAndTimes: D50 and D52 in the model: approver and kill switch
// names, and the times a request may carry.
func TestNamesAndTimes(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{"wire": {Cost: 1, RequiresApproval: true}}})
	m.SetName("Payments Bot")
	if _, err := m.Request(lineage.Request{ID: "w", Tool: "wire", At: at(1)}); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"", " alice", "alice\t", "al\u200bice", "al\u2028ice", "\u115falice", "PAYMENTS BOT", "payments bot"} {
		if _, err := m.Approve("w", by, at(2)); !errors.Is(err, lineage.ErrBadApprover) {
			t.Errorf("approve by %q: %v, want bad_approver", by, err)
		}
		if err := m.Terminate(by, at(2)); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("terminate by %q: %v, want bad_request", by, err)
		}
	}
	for _, when := range []time.Time{time.Unix(-1, 0), time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC), time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := m.Request(lineage.Request{Tool: "wire", At: when}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("request at %s: %v, want bad_request", when, err)
		}
	}
	if v, err := m.Request(lineage.Request{Tool: "wire", At: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil || v.Decision != lineage.Pending {
		t.Errorf("request in 2200: %+v, %v", v, err)
	}
}

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
