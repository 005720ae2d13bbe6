package api

import (
	"encoding/json"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/diag"
)

// Diagnostic is one problem of an invalid policy, as `lineagec check
// --format json` prints it: {code, pointer, file, line, col, message}. Its
// home is internal/diag, the diagnostics every stage of the compiler speaks;
// this is the same type under the wire's name.
type Diagnostic = diag.Diagnostic

// Role is what a principal may do (docs/service.md).
type Role string

// The roles of the service's principals.
const (
	RoleAdmin    Role = "admin"
	RoleApprover Role = "approver"
	RoleAgent    Role = "agent"
)

// Principal is who a token stands for (GET /v1/whoami). Name is the approver
// of the approvals and the `by` of the kills it makes; an agent's Name is its
// id, and Agent names it too.
type Principal struct {
	Name  string `json:"name"`
	Role  Role   `json:"role"`
	Agent string `json:"agent,omitempty"`
}

// CreateBody is the body of POST /v1/agents: a policy document (JSON; its
// Rego extensions inline as {source}), a name for people and the id of the
// agent it replaces.
type CreateBody struct {
	Policy json.RawMessage `json:"policy"`
	Name   string          `json:"name,omitempty"`
	Parent string          `json:"parent,omitempty"`
}

// Created is a new agent: its id, its token (shown this once) and its
// policy digest.
type Created struct {
	Agent  string `json:"agent"`
	Token  string `json:"token"`
	Digest string `json:"digest"`
}

// Agent is one row of GET /v1/agents: the store's index row of an agent.
// Seq is its last record's; Error says why a damaged log is damaged.
type Agent struct {
	Agent  string `json:"agent"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Digest string `json:"digest"`
	Seq    uint64 `json:"seq"`
	Error  string `json:"error,omitempty"`
}

// RequestBody is the body of POST /v1/agents/{agent}/requests: a request
// as an agent sends it. Its time is the server's clock.
type RequestBody struct {
	ID   string         `json:"id,omitempty"`
	Tool string         `json:"tool"`
	Args map[string]any `json:"args,omitzero"`
}

// NoteBody is the body of approve and reject (docs/approvals.md): the
// approver's note, at most 256 characters, nothing else (the approver is the
// caller). No body, or {}, is no note.
type NoteBody struct {
	Note string `json:"note,omitempty"`
}

// TerminateBody is the body of POST /v1/agents/{agent}/terminate: why, in
// words, kept in the termination record as its note.
type TerminateBody struct {
	Reason string `json:"reason,omitempty"`
}

// Pending is one request that awaits a person's decision: a row of GET
// /v1/pending and of `lineagec pending --format json`.
type Pending struct {
	Agent     string         `json:"agent"`
	Name      string         `json:"name"`
	RequestID string         `json:"request_id"`
	Tool      string         `json:"tool"`
	Args      map[string]any `json:"args"`
	At        lineage.Time   `json:"at"`
	Cost      int64          `json:"cost"`
}

// VerifyResult is the outcome of verifying a log (docs/log.md), the answer
// of GET /v1/agents/{agent}/verify and what `lineagec verify --format json`
// prints: ok with the number of records and the head hash, or not ok with
// the first bad seq and why (Seq and Message).
type VerifyResult struct {
	OK      bool    `json:"ok"`
	Records *int    `json:"records,omitempty"`
	Head    string  `json:"head,omitempty"`
	Seq     *uint64 `json:"seq,omitempty"`
	Message string  `json:"message,omitempty"`
}

// PolicyAnswer is the answer of GET /v1/agents/{agent}/policy: the agent's
// normalized policy and its digest.
type PolicyAnswer struct {
	Digest string          `json:"digest"`
	Policy json.RawMessage `json:"policy"`
}

// The types of the server-sent events of GET /v1/events.
const (
	EventPending    = "pending"
	EventDecided    = "decided"
	EventTerminated = "terminated"
)

// Event is one server-sent event: Type is pending, decided or terminated,
// Data its JSON (docs/service.md).
type Event struct {
	Type string
	Data json.RawMessage
}
