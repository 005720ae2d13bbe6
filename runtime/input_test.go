package runtime_test

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// TestInputNumbersFollowTheState: the numbers an agent's input carries
// (its remaining budget; its budget and spent where an extension reads the
// whole state) are the state's at every decision, though the runtime keeps
// their terms from one decision to the next, and the inputs already given
// keep theirs.
func TestInputNumbersFollowTheState(t *testing.T) {
	for name, src := range map[string]string{
		"generated": "budget: 100000\ntools: {pay: {cost: 30000}, read: {cost: 0}}\n",
		"extension": "budget: 100000\ntools: {pay: {cost: 30000}, read: {cost: 0}}\nrego:\n  - source: |\n      package lineage.ext.x\n\n      deny contains {\"reason\": \"r\"} if input.state.spent > 1000000\n",
	} {
		t.Run(name, func(t *testing.T) {
			var inputs []ast.Value
			o := opts("input")
			o.OnDecision = func(_ string, in ast.Value) { inputs = append(inputs, in) }
			rt := runtime.Open(newMem(), o)
			a := mustCreate(t, rt, mustCompileYAML(t, src), runtime.CreateOptions{})
			tools := []string{"read", "pay", "read", "read", "pay", "pay", "read", "pay"}
			for i, tool := range tools {
				mustRequest(t, rt, a, lineage.Request{Tool: tool, At: sec(float64(i + 1))})
			}
			spent := int64(0)
			for i, in := range inputs {
				want := map[string]int64{"remaining": 100000 - spent}
				if name == "extension" {
					want["budget"], want["spent"] = 100000, spent
				}
				for k, n := range want {
					v, err := in.Find(ast.MustParseRef("x.state." + k)[1:])
					if err != nil || v.Compare(ast.Number(ast.IntNumberTerm(int(n)).Value.(ast.Number))) != 0 {
						t.Errorf("decision %d: input.state.%s = %v (%v), want %d", i+1, k, v, err, n)
					}
				}
				if tools[i] == "pay" && spent+30000 <= 100000 {
					spent += 30000
				}
			}
			if len(inputs) != len(tools) {
				t.Fatalf("%d inputs for %d decisions", len(inputs), len(tools))
			}
		})
	}
}
