package policytest

import (
	"fmt"
	"strings"
)

// ManyTools writes a policy of n tools (tool_00000 …) that uses every kind
// of step: a rate limit for all; costs, caps, approvals and CEL constraints
// (on args.amount) spread over the tools; and a default rule with a cap, a
// cost and a constraint. tool_<n-1> is allowed for a fresh agent when n-1 is
// odd and not a multiple of 7.
func ManyTools(n int) []byte {
	var b strings.Builder
	b.WriteString("name: many tools\nbudget: 1000000\nscar_limit: 100\nrate_limit: {max_actions: 60, window_secs: 60}\n")
	b.WriteString("default_rule: {cost: 2, max_calls: 3, when: [{expr: \"args.amount <= 5\", reason: too_much}]}\ntools:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  tool_%05d: {cost: %d", i, i%3)
		if i%2 == 0 {
			fmt.Fprintf(&b, ", max_calls: %d", 10+i%50)
		}
		if i%7 == 0 {
			b.WriteString(", requires_approval: true")
		}
		if i%10 == 0 {
			fmt.Fprintf(&b, `, when: [{expr: "args.amount <= %d", reason: too_much, scar: minor}]`, 1000+i)
		}
		b.WriteString("}\n")
	}
	return []byte(b.String())
}
