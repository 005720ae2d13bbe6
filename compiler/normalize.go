package compiler

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/lineage-guard/lineage/internal/canon"
	"github.com/lineage-guard/lineage/policy"
)

// normDoc is the normalized policy as it is written into record 1: every default
// explicit, so that two spellings of one policy have one canonical JSON.
type normDoc struct {
	Name        string              `json:"name,omitempty"`
	Description string              `json:"description,omitempty"`
	Budget      int64               `json:"budget"`
	ScarLimit   int64               `json:"scar_limit"`
	RateLimit   *policy.RateLimit   `json:"rate_limit"`
	Tools       map[string]normRule `json:"tools"`
	DefaultRule *normRule           `json:"default_rule"`
	MaxPending  *int64              `json:"max_pending,omitempty"`
	ScarWeights policy.ScarWeights  `json:"scar_weights"`
	Rego        []normModule        `json:"rego"`
}

type normRule struct {
	Cost             int64            `json:"cost"`
	MaxCalls         *int64           `json:"max_calls,omitempty"`
	RequiresApproval bool             `json:"requires_approval"`
	When             []normConstraint `json:"when"`
	Pin              string           `json:"pin,omitempty"`
	// ArgsSchema stays absent when the rule has none, so that a policy
	// written (or recorded) before the field existed keeps its digest.
	ArgsSchema  json.RawMessage `json:"args_schema,omitempty"`
	Description string          `json:"description,omitempty"`
}

type normConstraint struct {
	Expr   string `json:"expr"`
	Reason string `json:"reason"`
	Scar   string `json:"scar"`
}

type normModule struct {
	Source string `json:"source"`
}

// normalize fills every default of docs/policy.md (decision D16 (normalization)). Extension paths must
// already be inlined (p.Rego holds sources only). recorded says the document is
// record 1 of a log: there an absent max_pending is a policy recorded before the
// field existed, which keeps no limit, and stays absent so that its digest is
// the one recorded (D260 (policies recorded before max_pending keep no limit)).
func normalize(p policy.Policy, recorded bool) policy.Policy {
	n := policy.Policy{
		Name:        p.Name,
		Description: p.Description,
		Budget:      p.Budget,
		RateLimit:   p.RateLimit,
		MaxPending:  p.MaxPending,
		Tools:       make(map[string]policy.ToolRule, len(p.Tools)),
	}
	if n.MaxPending == nil && !recorded {
		m := int64(policy.DefaultMaxPending)
		n.MaxPending = &m
	}
	limit := int64(policy.DefaultScarLimit)
	if p.ScarLimit != nil {
		limit = *p.ScarLimit
	}
	n.ScarLimit = &limit
	w := policy.ScarWeights{Minor: policy.DefaultMinor, Moderate: policy.DefaultModerate, Severe: policy.DefaultSevere}
	if p.ScarWeights != nil {
		w = *p.ScarWeights
	}
	n.ScarWeights = &w
	for name, r := range p.Tools {
		n.Tools[name] = normalizeRule(r)
	}
	if p.DefaultRule != nil {
		r := normalizeRule(*p.DefaultRule)
		n.DefaultRule = &r
	}
	n.Rego = []policy.RegoModule{}
	for _, m := range p.Rego {
		n.Rego = append(n.Rego, policy.RegoModule{Source: m.Source})
	}
	return n
}

func normalizeRule(r policy.ToolRule) policy.ToolRule {
	out := r
	out.When = make([]policy.Constraint, len(r.When))
	for i, c := range r.When {
		if c.Scar == "" {
			c.Scar = "moderate"
		}
		out.When[i] = c
	}
	return out
}

func toNormRule(r policy.ToolRule) normRule {
	out := normRule{Cost: r.Cost, MaxCalls: r.MaxCalls, RequiresApproval: r.RequiresApproval,
		Pin: r.Pin, ArgsSchema: r.ArgsSchema, Description: r.Description, When: []normConstraint{}}
	for _, c := range r.When {
		out.When = append(out.When, normConstraint(c))
	}
	return out
}

// canonical returns the RFC 8785 canonical JSON of a normalized policy and its digest.
func canonical(n policy.Policy) ([]byte, string, error) {
	d := normDoc{
		Name: n.Name, Description: n.Description, Budget: n.Budget, ScarLimit: *n.ScarLimit,
		RateLimit: n.RateLimit, MaxPending: n.MaxPending, Tools: map[string]normRule{}, ScarWeights: *n.ScarWeights,
		Rego: []normModule{},
	}
	for name, r := range n.Tools {
		d.Tools[name] = toNormRule(r)
	}
	if n.DefaultRule != nil {
		r := toNormRule(*n.DefaultRule)
		d.DefaultRule = &r
	}
	for _, m := range n.Rego {
		d.Rego = append(d.Rego, normModule{Source: m.Source})
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, "", err
	}
	doc, err := canon.Transform(raw)
	if err != nil {
		return nil, "", err
	}
	return doc, Digest(doc), nil
}

// Digest is "sha256:" + the hex SHA-256 of b (canon.Digest, the one digest).
func Digest(b []byte) string { return canon.Digest(b) }

// integralNumbers rewrites every json.Number that denotes an integer ("1.0",
// "1e3") as plain integer text, so that the schema's notion of integer (which
// accepts 1.0) and Go's agree when the document is decoded.
func integralNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = integralNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = integralNumbers(e)
		}
		return x
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			return x
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return x
		}
		return json.Number(strconv.FormatInt(int64(f), 10))
	default:
		return v
	}
}

// decodePolicy turns a validated document value into a policy.Policy.
func decodePolicy(v any) (policy.Policy, error) {
	raw, err := json.Marshal(integralNumbers(v))
	if err != nil {
		return policy.Policy{}, err
	}
	var p policy.Policy
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(&p)
	return p, err
}
