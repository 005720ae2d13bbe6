package analyze_test

import (
	"encoding/json"
	"testing"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/compiler/analyze"
)

func analyzeYAML(t *testing.T, src string) analyze.Report {
	t.Helper()
	c, err := compiler.Compile("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return analyze.Analyze(c.Policy)
}

// TestAnalyzeEdges: budgets of 0 and near the int64 limit, a budget too large
// for the exact search, and sums the caps cannot make.
func TestAnalyzeEdges(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		spend        int64
		secs         int64
		exact        bool
	}{
		{"nothing to spend", "budget: 0\ntools: {pay: {cost: 1}, read: {cost: 0}}", 0, 0, true},
		{"costs that do not add up", "budget: 5\ntools: {pay: {cost: 3}}", 3, 0, true},
		{"two costs reach the budget", "budget: 5\ntools: {a: {cost: 3}, b: {cost: 2}}", 5, 0, true},
		{"caps below the budget", "budget: 100\ntools: {a: {cost: 3, max_calls: 2}, b: {cost: 2, max_calls: 1}}", 8, 0, true},
		{"default_rule pays per name", "budget: 7\ntools: {}\ndefault_rule: {cost: 2, max_calls: 1}", 6, 0, true},
		{"fewest calls under the rate limit", "budget: 10\nrate_limit: {max_actions: 2, window_secs: 30}\ntools: {a: {cost: 1}, b: {cost: 5}}", 10, 0, true},
		{"more calls than a window", "budget: 9\nrate_limit: {max_actions: 1, window_secs: 30}\ntools: {a: {cost: 2}, b: {cost: 5}}", 9, 60, true},
		{"too large to search", "budget: 9007199254740991\nrate_limit: {max_actions: 1, window_secs: 9007199254740991}\ntools: {a: {cost: 1}, b: {cost: 3}}", 9007199254740991, 1<<53 - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := analyzeYAML(t, tc.policy)
			raw, _ := json.Marshal(r)
			if r.MaxSpend != tc.spend || *r.MinSecondsToExhaust != tc.secs || r.Exact != tc.exact {
				t.Errorf("max_spend %d, min_seconds %d, exact %v; want %d, %d, %v\n%s", r.MaxSpend, *r.MinSecondsToExhaust, r.Exact, tc.spend, tc.secs, tc.exact, raw)
			}
		})
	}
}
