package policytest

import (
	"fmt"
	"math/rand/v2"

	"github.com/lineage-guard/lineage/policy"
)

// Tools are the tool names Random's policies list (a prefix of them): a
// sequence that draws its requests from Tools meets listed and unlisted tools.
var Tools = []string{"read", "pay", "wire", "llm_turn", "deploy", "email", "run_shell", "fs.write"}

var celPool = []string{
	"args.amount <= %d",
	"has(args.amount) && args.amount < %d",
	"state.spent < %d",
	"state.remaining >= %d",
	"size(tool) > %d",
	"now.getSeconds() >= %d",
	"state.scar_score < %d",
	"!has(args.to) || args.to != 'evil%d'",
}

var severities = []string{"", "none", "minor", "moderate", "severe"}

// schemaPool are small argument schemas (docs/policy.md#argument-schemas), %d a
// small number; args with amount and to match them some of the time.
var schemaPool = []string{
	`{"type":"object","properties":{"amount":{"type":"integer","maximum":%d}},"required":["amount"]}`,
	`{"type":"object","properties":{"amount":{"type":"number"},"to":{"type":"string"}},"additionalProperties":false,"minProperties":%d}`,
	`{"type":"object","properties":{"amount":{"type":"number","minimum":%d,"multipleOf":0.5}}}`,
	`{"type":"object","properties":{"to":{"enum":["evil%d","evil9"]}},"required":["to"]}`,
	`{"$defs":{"n":{"type":"integer","exclusiveMinimum":%d}},"type":"object","properties":{"amount":{"$ref":"#/$defs/n"}}}`,
	`{"type":"object","properties":{"to":{"type":"string","pattern":"%d$"}},"maxProperties":1}`,
	`{"type":"object","anyOf":[{"required":["to"]},{"properties":{"amount":{"exclusiveMaximum":%d}}}]}`,
	`{"type":"object","not":{"required":["amount","to"]},"propertyNames":{"maxLength":%d}}`,
	`{"type":"object","if":{"required":["to"]},"then":{"properties":{"amount":{"const":%d}}},"else":{"properties":{"amount":{"type":["integer","null"]}}}}`,
	`{"type":"object","properties":{"to":{"type":"array","items":{"type":"string"},"maxItems":%d,"uniqueItems":true}}}`,
}

// RandomRule draws one tool rule: a cost, sometimes a cap, an approval, an
// argument schema (from a small pool, matched by args that carry amount and
// to some of the time) and CEL constraints (on args, state, tool and now).
func RandomRule(r *rand.Rand) policy.ToolRule {
	rule := policy.Cost(int64(r.IntN(4)))
	if r.IntN(3) == 0 {
		rule = rule.WithMaxCalls(int64(1 + r.IntN(3)))
	}
	if r.IntN(4) == 0 {
		rule = rule.WithApproval()
	}
	if r.IntN(3) == 0 {
		rule = rule.WithArgsSchema(fmt.Sprintf(schemaPool[r.IntN(len(schemaPool))], r.IntN(8)))
	}
	for n := r.IntN(4) - 1; n > 0; n-- {
		rule = rule.WithConstraint(fmt.Sprintf(celPool[r.IntN(len(celPool))], r.IntN(8)),
			fmt.Sprintf("c%d", r.IntN(3)), severities[r.IntN(len(severities))])
	}
	return rule
}

// Random draws a policy from r: a small budget, some of Tools with
// RandomRule's rules, and sometimes a default rule, a rate limit, a scar
// limit, scar weights and a small max_pending, so that short sequences meet
// every limit. The same r state draws the same policy.
func Random(r *rand.Rand) policy.Policy {
	b := policy.New(int64(r.IntN(12)))
	for _, t := range Tools[:2+r.IntN(4)] {
		if r.IntN(5) > 0 {
			b.Allow(t, RandomRule(r))
		}
	}
	if r.IntN(4) == 0 {
		b.DefaultRule(RandomRule(r))
	}
	if r.IntN(2) == 0 {
		b.RateLimit(int64(1+r.IntN(4)), int64(1+r.IntN(5)))
	}
	if r.IntN(2) == 0 {
		b.ScarLimit(int64(1 + r.IntN(15)))
	}
	if r.IntN(3) == 0 {
		b.ScarWeights(int64(1+r.IntN(3)), int64(1+r.IntN(5)), int64(1+r.IntN(10)))
	}
	if r.IntN(2) == 0 {
		// Small limits, so that sequences meet them (the default, 10, they rarely do).
		b.MaxPending(int64(1 + r.IntN(3)))
	}
	return b.Policy()
}
