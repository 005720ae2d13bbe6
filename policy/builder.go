package policy

import "encoding/json"

// Builder writes a policy from Go, mirroring the product note:
//
//	policy.New(25_000).
//		Allow("llm_turn", policy.Cost(0).WithMaxCalls(60)).
//		Allow("read_invoice", policy.Cost(0)).
//		Allow("pay_invoice", policy.Cost(1).WithApproval().WithMaxCalls(10)).
//		RateLimit(60, 60).
//		ScarLimit(10).
//		Policy()
type Builder struct{ p Policy }

// New starts a policy with a total budget, no tools and every other field at its default.
func New(budget int64) *Builder {
	return &Builder{p: Policy{Budget: budget, Tools: map[string]ToolRule{}}}
}

// Allow adds (or replaces) a tool rule.
func (b *Builder) Allow(tool string, rule ToolRule) *Builder {
	b.p.Tools[tool] = rule
	return b
}

// RateLimit sets the sliding-window rate limit.
func (b *Builder) RateLimit(maxActions, windowSecs int64) *Builder {
	b.p.RateLimit = &RateLimit{MaxActions: maxActions, WindowSecs: windowSecs}
	return b
}

// ScarLimit sets the scar score at which the agent is terminated.
func (b *Builder) ScarLimit(limit int64) *Builder {
	b.p.ScarLimit = &limit
	return b
}

// MaxPending sets the most requests of the agent pending approval at once.
func (b *Builder) MaxPending(n int64) *Builder {
	b.p.MaxPending = &n
	return b
}

// ScarWeights sets the weight of each severity.
func (b *Builder) ScarWeights(minor, moderate, severe int64) *Builder {
	b.p.ScarWeights = &ScarWeights{Minor: minor, Moderate: moderate, Severe: severe}
	return b
}

// DefaultRule sets the rule for tools that are not listed.
func (b *Builder) DefaultRule(rule ToolRule) *Builder {
	b.p.DefaultRule = &rule
	return b
}

// Rego adds a Rego extension module given as source.
func (b *Builder) Rego(source string) *Builder {
	b.p.Rego = append(b.p.Rego, RegoModule{Source: source})
	return b
}

// Name sets the policy's name.
func (b *Builder) Name(name string) *Builder {
	b.p.Name = name
	return b
}

// Policy returns the document built so far (a copy the builder no longer touches).
func (b *Builder) Policy() Policy {
	p := b.p
	p.Tools = make(map[string]ToolRule, len(b.p.Tools))
	for k, v := range b.p.Tools {
		p.Tools[k] = v
	}
	p.Rego = append([]RegoModule(nil), b.p.Rego...)
	return p
}

// Cost starts a tool rule that charges cost credits per allowed call.
func Cost(cost int64) ToolRule { return ToolRule{Cost: cost} }

// WithMaxCalls caps the allowed calls of the tool over the agent's life.
func (r ToolRule) WithMaxCalls(n int64) ToolRule {
	r.MaxCalls = &n
	return r
}

// WithApproval makes every call wait for a person's approval.
func (r ToolRule) WithApproval() ToolRule {
	r.RequiresApproval = true
	return r
}

// WithArgsSchema sets the JSON Schema (2020-12) object the args must match
// (docs/policy.md#argument-schemas), given as JSON.
func (r ToolRule) WithArgsSchema(schema string) ToolRule {
	r.ArgsSchema = json.RawMessage(schema)
	return r
}

// WithConstraint adds a CEL constraint; scar is "none", "minor", "moderate" or "severe".
func (r ToolRule) WithConstraint(expr, reason, scar string) ToolRule {
	r.When = append(append([]Constraint(nil), r.When...), Constraint{Expr: expr, Reason: reason, Scar: scar})
	return r
}
