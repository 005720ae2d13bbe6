// Package analyze states what a policy can never let an agent exceed, from
// the normalized policy document alone (docs/authoring.md#bounds).
//
// The bounds are sound because CEL constraints and Rego extensions can only
// deny (docs/extensions.md): what the document's numbers admit is an upper
// bound on what any agent under the policy can do. Without constraints and
// extensions each bound is also reached by some sequence of requests.
package analyze

import (
	"fmt"
	"math"
	"math/bits"
	"sort"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/policy"
)

// Report is the analysis of one policy; its JSON is the output of
// `lineagec analyze --format json`. A nil pointer is "unbounded" (null).
type Report struct {
	// MaxSpend is the most credits an agent can ever spend: the most a set of
	// calls the caps admit can add up to without passing the budget.
	MaxSpend int64 `json:"max_spend"`
	// Tools are the listed tools by name.
	Tools map[string]Tool `json:"tools"`
	// DefaultRule says that unlisted tool names are admitted (by default_rule).
	DefaultRule bool `json:"default_rule"`
	// UnlistedAttemptsToTermination is how many calls of unlisted tools end the
	// agent (each a moderate scar); null when default_rule admits them.
	UnlistedAttemptsToTermination *int64 `json:"unlisted_attempts_to_termination"`
	// MinSecondsToExhaust is the least time, in seconds from the first allowed
	// call, in which the agent can spend MaxSpend under the rate limit.
	MinSecondsToExhaust *int64 `json:"min_seconds_to_exhaust"`
	// Findings are what a reviewer should look at, in the order of their paths.
	Findings []Finding `json:"findings"`
	// Exact is false when the budget was too large to search every sum: then
	// MaxSpend and MinSecondsToExhaust are sound bounds that may not be reached.
	Exact bool `json:"-"`
}

// Tool is the bound of one listed tool.
type Tool struct {
	// MaxCalls is the most allowed calls over the agent's life: its max_calls,
	// fewer when the budget cannot pay for them; null when unbounded (a free,
	// uncapped tool).
	MaxCalls *int64 `json:"max_calls"`
	// MaxCredits is the most credits its calls can spend.
	MaxCredits int64 `json:"max_credits"`
	// RequiresApproval: every call needs a person's approval.
	RequiresApproval bool `json:"requires_approval"`
	// Reachable: a call can be allowed at all (its cost is within the budget).
	Reachable bool `json:"reachable"`
}

// Finding is one thing the analysis points out.
type Finding struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Path    string `json:"path"`
}

// Finding codes.
const (
	CodeDefaultRule     = "default_rule_admits_any_name"
	CodeUnreachable     = "cost_exceeds_budget"
	CodeCapUnaffordable = "calls_exceed_budget"
)

// searchLimit bounds the work of the exact sums (steps of the search).
const searchLimit = 1 << 24

// item is a kind of call that can be paid for: count calls of cost each
// (count < 0: as many as the budget allows).
type item struct {
	cost  int64
	count int64
}

// Analyze analyzes a normalized policy (policy.Compiled.Policy).
func Analyze(p policy.Policy) Report {
	budget := p.Budget
	rep := Report{Tools: map[string]Tool{}, DefaultRule: p.DefaultRule != nil, Findings: []Finding{}, Exact: true}
	names := make([]string, 0, len(p.Tools))
	for name := range p.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	var items []item
	for _, name := range names {
		r := p.Tools[name]
		t := Tool{RequiresApproval: r.RequiresApproval, Reachable: r.Cost <= budget}
		calls := callsOf(r, budget)
		t.MaxCalls = calls
		if calls != nil {
			t.MaxCredits = *calls * r.Cost
		}
		rep.Tools[name] = t
		rep.Findings = append(rep.Findings, ruleFindings(r, budget, "tool "+name, "tools", name)...)
		if r.Cost > 0 && t.Reachable {
			items = append(items, item{cost: r.Cost, count: *calls})
		}
	}
	if d := p.DefaultRule; d != nil {
		rep.Findings = append(rep.Findings, Finding{Code: CodeDefaultRule, Path: "/default_rule",
			Message: "default_rule admits a tool of any name: an agent can call tools this policy never names"})
		rep.Findings = append(rep.Findings, ruleFindings(*d, budget, "default_rule", "default_rule")...)
		if d.Cost > 0 && d.Cost <= budget {
			// Each name has its own max_calls: there are as many names as the budget pays for.
			items = append(items, item{cost: d.Cost, count: budget / d.Cost})
		}
	} else {
		moderate := int64(policy.DefaultModerate)
		if p.ScarWeights != nil {
			moderate = p.ScarWeights.Moderate
		}
		limit := int64(policy.DefaultScarLimit)
		if p.ScarLimit != nil {
			limit = *p.ScarLimit
		}
		n := (limit + moderate - 1) / moderate
		rep.UnlistedAttemptsToTermination = &n
	}
	spend, calls, exact := maxSpend(items, budget)
	rep.MaxSpend, rep.Exact = spend, exact
	var secs int64
	if rl := p.RateLimit; rl != nil && calls > 0 {
		// max_actions allowed at t, the next max_actions at t+window (the window
		// is (t-window, t]), and so on.
		windows := (calls+rl.MaxActions-1)/rl.MaxActions - 1
		// Capped at 2^53-1, a number every JSON reader holds exactly: a lower
		// bound made lower stays sound.
		secs = min(satMul(windows, rl.WindowSecs), 1<<53-1)
	}
	rep.MinSecondsToExhaust = &secs
	sort.SliceStable(rep.Findings, func(i, j int) bool { return rep.Findings[i].Path < rep.Findings[j].Path })
	return rep
}

// callsOf is the most allowed calls of one rule's tool (per name for
// default_rule): nil when unbounded.
func callsOf(r policy.ToolRule, budget int64) *int64 {
	var n int64
	switch {
	case r.Cost > budget:
		n = 0
	case r.Cost == 0 && r.MaxCalls == nil:
		return nil
	case r.Cost == 0:
		n = *r.MaxCalls
	default:
		n = budget / r.Cost
		if r.MaxCalls != nil && *r.MaxCalls < n {
			n = *r.MaxCalls
		}
	}
	return &n
}

// ruleFindings are the findings of one tool rule.
func ruleFindings(r policy.ToolRule, budget int64, what string, ptr ...string) []Finding {
	var out []Finding
	if r.Cost > budget {
		out = append(out, Finding{Code: CodeUnreachable, Path: diag.Pointer(append(ptr, "cost")...),
			Message: fmt.Sprintf("%s costs %d, more than the budget of %d: it can never be allowed", what, r.Cost, budget)})
	} else if r.Cost > 0 && r.MaxCalls != nil && *r.MaxCalls > budget/r.Cost {
		out = append(out, Finding{Code: CodeCapUnaffordable, Path: diag.Pointer(append(ptr, "max_calls")...),
			Message: fmt.Sprintf("%s allows %d calls at %d credits each, but the budget of %d pays for at most %d of them",
				what, *r.MaxCalls, r.Cost, budget, budget/r.Cost)})
	}
	return out
}

// maxSpend is the largest sum of costs at most budget that the items admit,
// and the fewest calls that reach it. When the search would be too large it
// returns the simple bound (sound, not always reached) and exact false.
func maxSpend(items []item, budget int64) (spend, calls int64, exact bool) {
	var simple int64
	var maxCost int64
	for _, it := range items {
		simple = satAdd(simple, satMul(it.cost, it.count))
		maxCost = max(maxCost, it.cost)
	}
	simple = min(simple, budget)
	if simple == 0 {
		return 0, 0, true
	}
	// Split each item into parts of 1, 2, 4, … calls (each part taken or not),
	// so that every count up to its bound is a choice of parts.
	type part struct{ cost, calls int64 }
	var parts []part
	for _, it := range items {
		for k, left := int64(1), it.count; left > 0; k *= 2 {
			take := min(k, left)
			parts = append(parts, part{cost: take * it.cost, calls: take})
			left -= take
		}
	}
	if simple > searchLimit || int64(len(parts))*(simple+1) > searchLimit {
		return simple, (simple + maxCost - 1) / maxCost, false
	}
	// fewest[s] is the fewest calls that spend exactly s (-1: no set does).
	n := simple + 1
	fewest := make([]int64, n)
	for i := range fewest {
		fewest[i] = -1
	}
	fewest[0] = 0
	for _, pt := range parts {
		for s := n - 1; s >= pt.cost; s-- {
			if prev := fewest[s-pt.cost]; prev >= 0 && (fewest[s] < 0 || prev+pt.calls < fewest[s]) {
				fewest[s] = prev + pt.calls
			}
		}
	}
	for s := n - 1; s >= 0; s-- {
		if fewest[s] >= 0 {
			return s, fewest[s], true
		}
	}
	return 0, 0, true
}

func satAdd(a, b int64) int64 {
	if s, c := bits.Add64(uint64(a), uint64(b), 0); c == 0 && s <= math.MaxInt64 {
		return int64(s)
	}
	return math.MaxInt64
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
