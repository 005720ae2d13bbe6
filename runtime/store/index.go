package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The indexes a store keeps of its logs: one row per agent, and one row per
// pending request. They serve the lists of the service (docs/service.md:
// lists scale with what they return, not with the store); nothing decides
// from them: verdicts come from the fold of the log. Every backend derives
// them with IndexChangeOf, the one place that reads a record for them.

// Agent statuses of an AgentRow.
const (
	StatusAlive      = "alive"
	StatusTerminated = "terminated"
	// StatusDamaged: a record of the log could not be read for the index.
	StatusDamaged = "damaged"
)

// DefaultListLimit and MaxListLimit bound a page of a list.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// AgentRow is one agent as the agent index knows it.
type AgentRow struct {
	Agent  string `json:"agent"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Digest string `json:"digest"`
	// Seq is the seq of the log's last record (0 for a log without records).
	Seq   uint64 `json:"seq"`
	Error string `json:"error,omitempty"`
}

// PendingRow is one pending request as the pending index knows it.
type PendingRow struct {
	Agent     string          `json:"agent"`
	Name      string          `json:"name"` // the agent's, from the agent index
	RequestID string          `json:"request_id"`
	Seq       uint64          `json:"seq"` // of its action record
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args"`
	At        string          `json:"at"` // the action record's time, as written
	Cost      int64           `json:"cost"`
}

// ListQuery asks for one page of a list.
type ListQuery struct {
	// Cursor is "" for the first page, else a NextCursor of the page before.
	Cursor string
	// Limit is the most rows of the page (DefaultListLimit if 0).
	Limit int
	// Status, for agents, keeps only the agents of that status ("" all).
	Status string
}

// Lister is implemented by the stores that keep the indexes: every store of
// this module. A page costs what it returns (and, for pending requests, the
// number of pending requests), never the number of agents.
type Lister interface {
	// ListAgents returns a page of the agent index in the order of the ids,
	// and the cursor of the next page ("" after the last).
	ListAgents(q ListQuery) ([]AgentRow, string, error)
	// ListPending returns a page of the pending index, by agent id then seq.
	ListPending(q ListQuery) ([]PendingRow, string, error)
}

// IndexChecker is implemented by the stores whose indexes `lineagec verify`
// checks against an agent's log.
type IndexChecker interface {
	// CheckIndexOf returns one line per difference between what the
	// indexes say of agent and what its log says.
	CheckIndexOf(agent string) ([]string, error)
}

// ErrBadCursor is returned for a cursor that no page gave.
var ErrBadCursor = errors.New("store: not a cursor of this list")

// EncodeCursor and DecodeCursor make a list's position opaque.
func EncodeCursor(key string) string {
	if key == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(key))
}

// DecodeCursor reads a cursor of EncodeCursor.
func DecodeCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return string(b), nil
}

// CheckListQuery returns the query with its limit filled in, or an error.
func CheckListQuery(q ListQuery) (ListQuery, error) {
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 0 || q.Limit > MaxListLimit {
		return q, fmt.Errorf("store: limit %d: must be 1 to %d", q.Limit, MaxListLimit)
	}
	switch q.Status {
	case "", StatusAlive, StatusTerminated, StatusDamaged:
	default:
		return q, fmt.Errorf("store: status %q: must be alive, terminated or damaged", q.Status)
	}
	return q, nil
}

// PendingKey is the position of a pending request in its list.
func PendingKey(agent string, seq uint64) string {
	return fmt.Sprintf("%s\x00%020d", agent, seq)
}

// Costs is what a policy charges: by tool, and the default rule's cost.
type Costs struct {
	Tools   map[string]int64 `json:"tools,omitempty"`
	Default int64            `json:"default,omitempty"`
}

// Cost is what tool costs under c.
func (c Costs) Cost(tool string) int64 {
	if v, ok := c.Tools[tool]; ok {
		return v
	}
	return c.Default
}

// IndexChange is what one record does to the indexes.
type IndexChange struct {
	// Name is set by the genesis record (seq 0).
	Name *string
	// Digest and Costs are set by the policy record (seq 1).
	Digest string
	Costs  *Costs
	// Terminated is set by a termination record.
	Terminated bool
	// AddPending is set by an action record whose verdict is pending; its
	// Cost is for the caller to fill from the policy.
	AddPending *PendingRow
	// RemovePending is set by an approval record: the request it decides.
	RemovePending string
}

// IndexChangeOf maps one record of agent's log to the changes it makes to
// the indexes: an action with a pending verdict adds a pending request, an
// approval (or rejection) removes it, a termination marks the agent
// terminated (its pending requests stay pending in the log, and the lists
// drop them: nobody can decide them any more). It reads only the members
// it needs; the record's chain is the runtime's to check.
//
// Its definition is encoding/json's reading (indexChangeDecoded). The
// records a decision appends (action, approval, termination) are read by
// indexChangeFast, which answers only where that reading agrees, by D410 (the index reads a decision's records in one tokenizer pass)
// (the index reads a decision's records in one tokenizer pass); anything
// else, and the rarer kinds, by encoding/json.
func IndexChangeOf(agent string, seq uint64, rec []byte) (IndexChange, error) {
	if ch, ok := indexChangeFast(agent, seq, rec); ok {
		return ch, nil
	}
	return indexChangeDecoded(agent, seq, rec)
}

// indexChangeDecoded is IndexChangeOf by encoding/json.
func indexChangeDecoded(agent string, seq uint64, rec []byte) (IndexChange, error) {
	var r struct {
		Kind string          `json:"kind"`
		At   string          `json:"at"`
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(rec, &r); err != nil {
		return IndexChange{}, fmt.Errorf("store: index %s seq %d: %w", agent, seq, err)
	}
	var ch IndexChange
	var err error
	switch r.Kind {
	case "genesis":
		var b struct {
			Name string `json:"name"`
		}
		err = json.Unmarshal(r.Body, &b)
		ch.Name = &b.Name
	case "policy":
		var b struct {
			Digest string `json:"digest"`
			Policy struct {
				Tools map[string]struct {
					Cost int64 `json:"cost"`
				} `json:"tools"`
				Default *struct {
					Cost int64 `json:"cost"`
				} `json:"default_rule"`
			} `json:"policy"`
		}
		err = json.Unmarshal(r.Body, &b)
		c := &Costs{}
		for tool, rule := range b.Policy.Tools {
			if rule.Cost != 0 {
				if c.Tools == nil {
					c.Tools = map[string]int64{}
				}
				c.Tools[tool] = rule.Cost
			}
		}
		if b.Policy.Default != nil {
			c.Default = b.Policy.Default.Cost
		}
		ch.Digest, ch.Costs = b.Digest, c
	case "action":
		var b struct {
			Request struct {
				ID   string          `json:"id"`
				Tool string          `json:"tool"`
				Args json.RawMessage `json:"args"`
			} `json:"request"`
			Verdict struct {
				Decision string `json:"decision"`
			} `json:"verdict"`
		}
		err = json.Unmarshal(r.Body, &b)
		if err == nil && b.Verdict.Decision == "pending" {
			ch.AddPending = pendingRow(agent, seq, r.At, b.Request.ID, b.Request.Tool, b.Request.Args)
		}
	case "approval":
		var b struct {
			RequestID string `json:"request_id"`
		}
		err = json.Unmarshal(r.Body, &b)
		ch.RemovePending = b.RequestID
	case "termination":
		ch.Terminated = true
	default:
		err = fmt.Errorf("unknown record kind %q", r.Kind)
	}
	if err != nil {
		return IndexChange{}, fmt.Errorf("store: index %s seq %d: %w", agent, seq, err)
	}
	return ch, nil
}

// pendingRow is the pending request of an action record; args are the raw
// JSON of its request's args, which the row keeps (a copy).
func pendingRow(agent string, seq uint64, at, id, tool string, args []byte) *PendingRow {
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	return &PendingRow{Agent: agent, RequestID: id, Seq: seq, Tool: tool, Args: bytes.Clone(args), At: at}
}

// ParsePendingKey splits a PendingKey (of a decoded cursor).
func ParsePendingKey(key string) (agent string, seq uint64, ok bool) {
	agent, s, ok := strings.Cut(key, "\x00")
	if !ok || len(s) != 20 {
		return "", 0, false
	}
	_, err := fmt.Sscan(s, &seq)
	return agent, seq, err == nil
}
