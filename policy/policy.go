// Package policy owns the policy document as Go values (docs/policy.md), the builder that
// writes one from Go, and the compiled form that the compiler hands the runtime.
//
// It does not validate, normalize or compile: package compiler does. A Policy built
// here and the same policy written in YAML compile to the same normalized document
// and digest.
package policy

import (
	"encoding/json"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	lineagerego "github.com/lineage-guard/lineage/rego"
)

// Policy is a policy document. Pointer fields distinguish "absent" (take the
// default) from an explicit value; after normalization every default is filled.
type Policy struct {
	Schema      string              `json:"$schema,omitempty"`
	Name        string              `json:"name,omitempty"`
	Description string              `json:"description,omitempty"`
	Budget      int64               `json:"budget"`
	ScarLimit   *int64              `json:"scar_limit,omitempty"`
	RateLimit   *RateLimit          `json:"rate_limit"`
	Tools       map[string]ToolRule `json:"tools"`
	DefaultRule *ToolRule           `json:"default_rule"`
	// MaxPending is the most requests pending at once (docs/policy.md). After
	// normalization nil means no limit: a policy recorded before the field
	// existed (compiler.CompileRecorded).
	MaxPending  *int64       `json:"max_pending,omitempty"`
	ScarWeights *ScarWeights `json:"scar_weights,omitempty"`
	Rego        []RegoModule `json:"rego,omitempty"`
}

// RateLimit allows at most MaxActions allowed actions in any sliding window of WindowSecs.
type RateLimit struct {
	MaxActions int64 `json:"max_actions"`
	WindowSecs int64 `json:"window_secs"`
}

// ScarWeights is the weight of each scar severity.
type ScarWeights struct {
	Minor    int64 `json:"minor"`
	Moderate int64 `json:"moderate"`
	Severe   int64 `json:"severe"`
}

// ToolRule says what one tool costs and what limits it.
type ToolRule struct {
	Cost             int64        `json:"cost"`
	MaxCalls         *int64       `json:"max_calls,omitempty"`
	RequiresApproval bool         `json:"requires_approval,omitempty"`
	When             []Constraint `json:"when,omitempty"`
	// Pin is "sha256:<64 hex>", the digest of the MCP tool definition this
	// rule is for (docs/policy.md, docs/mcp.md); "" means not pinned.
	Pin string `json:"pin,omitempty"`
	// ArgsSchema is a JSON Schema (2020-12) object the args must match
	// (docs/policy.md#argument-schemas); nil for none.
	ArgsSchema  json.RawMessage `json:"args_schema,omitempty"`
	Description string          `json:"description,omitempty"`
}

// Constraint is a CEL expression that must hold for a call to be allowed (docs/policy.md#cel-constraints).
type Constraint struct {
	Expr   string `json:"expr"`
	Reason string `json:"reason"`
	// Scar is "none", "minor", "moderate" or "severe"; empty means moderate.
	Scar string `json:"scar,omitempty"`
}

// RegoModule is a Rego extension (docs/extensions.md): a file path, inlined at compile
// time, or the module source itself.
type RegoModule struct {
	Path   string `json:"path,omitempty"`
	Source string `json:"source,omitempty"`
}

// Defaults of docs/policy.md.
const (
	DefaultScarLimit  = 10
	DefaultMinor      = 1
	DefaultModerate   = 3
	DefaultSevere     = 10
	DefaultMaxPending = 10
)

// Compiled is a validated, normalized policy ready to run: the unit the compiler
// produces and the runtime consumes.
type Compiled struct {
	// Digest is "sha256:" + hex SHA-256 of Document.
	Digest string
	// Document is the canonical JSON (RFC 8785) of the normalized policy.
	Document []byte
	// Policy is the normalized policy: every default filled, extensions inlined.
	Policy Policy
	// Modules are the Rego modules: base library, generated policy, extensions.
	Modules []lineagerego.Module
	// Query is the Rego query that yields the verdict of a request or an approval.
	Query string
	// RejectQuery is the Rego query that yields the verdict of a rejection.
	RejectQuery string
	// Options are extra rego options the query needs, such as the CEL builtin
	// bound to this policy's expressions. Nil when the policy has no CEL.
	Options []func(*rego.Rego)
	// Rules are the tool rules as Rego extensions read them in input.rule
	// (docs/extensions.md): JSON objects with every field present, keyed by tool name;
	// DefaultRule is the rule of unlisted tools, if the policy has one. Whoever
	// builds the query input puts the matched one there. Both are nil when the
	// policy has no extensions.
	Rules       map[string]json.RawMessage
	DefaultRule json.RawMessage
	// Reads says which parts of the input, beyond what every verdict reads,
	// the policy's rules read (rego/guard.rego lists the input): whoever
	// builds the input may leave out the rest.
	Reads InputReads
	// Compiler is OPA's compilation of Modules, made when the compiler
	// checked them: whoever prepares the queries reuses it rather than
	// compiling the modules again (nil: compile Modules). Read only.
	Compiler *ast.Compiler
}

// InputReads names the parts of the query input that only some policies read.
type InputReads struct {
	// Args: request.args and request.at_ns (CEL constraints and argument
	// schemas read them).
	Args bool
	// State: state.budget, state.spent and state.calls (a CEL constraint
	// reads state).
	State bool
	// All: the whole input of docs/policy.md#cel-constraints, docs/extensions.md, request.id and request.at and
	// input.rule included (Rego extensions may read any of it).
	All bool
}
