package conformance

import (
	"testing"

	"github.com/lineage-guard/lineage"
)

// TestExpectNull: in expect, terminated: null (and scar: null) is "none":
// it holds for a verdict that caused no termination and fails for one that
// did, while leaving the field out compares nothing (docs/cases.md).
func TestExpectNull(t *testing.T) {
	ended := &lineage.Verdict{Decision: lineage.Allow, Terminated: lineage.BudgetExhausted}
	plain := &lineage.Verdict{Decision: lineage.Allow}
	scarred := &lineage.Verdict{Decision: lineage.Deny, Scar: &lineage.Scar{Severity: lineage.Minor, Weight: 1}}
	for _, tc := range []struct {
		exp  map[string]any
		v    *lineage.Verdict
		fail bool
	}{
		{map[string]any{"terminated": nil}, plain, false},
		{map[string]any{"terminated": nil}, ended, true},
		{map[string]any{"terminated": "none"}, ended, true},
		{map[string]any{"decision": "allow"}, ended, false},
		{map[string]any{"scar": nil}, plain, false},
		{map[string]any{"scar": nil}, scarred, true},
	} {
		fails := compareStep(tc.exp, tc.v, nil, lineage.State{})
		if (len(fails) > 0) != tc.fail {
			t.Errorf("expect %v against %+v: failures %v, want failing %v", tc.exp, *tc.v, fails, tc.fail)
		}
	}
}
