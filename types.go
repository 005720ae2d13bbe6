package lineage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Decision is the outcome of a verdict.
type Decision string

const (
	Allow   Decision = "allow"
	Deny    Decision = "deny"
	Pending Decision = "pending"
)

// Severity names a scar's weight class.
type Severity string

const (
	Minor    Severity = "minor"
	Moderate Severity = "moderate"
	Severe   Severity = "severe"
)

// Severities lists the scar severities from lightest to heaviest.
var Severities = []Severity{Minor, Moderate, Severe}

// Termination is why an agent's log was sealed; "" means it was not.
// It encodes as JSON null when empty, as docs/decision-order.md requires.
type Termination string

const (
	BudgetExhausted  Termination = "budget_exhausted"
	ScarLimitReached Termination = "scar_limit_reached"
	Killed           Termination = "killed"
)

// MarshalJSON encodes "" as null.
func (t Termination) MarshalJSON() ([]byte, error) {
	if t == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(t))
}

// UnmarshalJSON decodes null as "".
func (t *Termination) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*t = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*t = Termination(s)
	return nil
}

// Request is one action an agent asks for (docs/decision-order.md).
//
// Args holds decoded JSON with numbers as json.Number, so that integral numbers
// stay integers (CEL sees them as int) and nothing is rounded.
type Request struct {
	ID   string         `json:"id"`
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	// At is the time of the request; the zero time means "now" by the runtime's clock.
	At time.Time `json:"-"`
}

// Scar is the mark a denial leaves (docs/decision-order.md).
type Scar struct {
	Severity Severity `json:"severity"`
	Weight   int64    `json:"weight"`
}

// Verdict is the guard's answer to a request or an approval (docs/decision-order.md).
type Verdict struct {
	Decision   Decision    `json:"decision"`
	Reason     string      `json:"reason"`
	Cost       int64       `json:"cost"`
	Scar       *Scar       `json:"scar"`
	Terminated Termination `json:"terminated"`
	RequestID  string      `json:"request_id"`
	Seq        uint64      `json:"seq"`
	// Note is the approver's note of an approval or rejection (docs/approvals.md),
	// in the answers that give a decided request's verdict. A verdict written in
	// a record never has one: the approval record keeps the note beside it.
	Note string `json:"note,omitempty"`
}

// Kind is the kind of a log record (docs/log.md).
type Kind string

const (
	KindGenesis     Kind = "genesis"
	KindPolicy      Kind = "policy"
	KindAction      Kind = "action"
	KindApproval    Kind = "approval"
	KindTermination Kind = "termination"
)

// Record is one entry of an agent's hash-chained log. Field names are part of
// the contract (docs/log.md). Body is the canonical JSON of one of the *Body types.
type Record struct {
	Seq  uint64          `json:"seq"`
	At   Time            `json:"at"`
	Kind Kind            `json:"kind"`
	Prev string          `json:"prev"`
	Body json.RawMessage `json:"body"`
	Hash string          `json:"hash"`
}

// Parent names the agent a new agent descends from, and the head of its log then.
type Parent struct {
	Agent string `json:"agent"`
	Head  string `json:"head"`
}

// GenesisBody is the body of record 0.
type GenesisBody struct {
	Agent  string  `json:"agent"`
	Name   string  `json:"name,omitempty"`
	Parent *Parent `json:"parent,omitempty"`
}

// PolicyBody is the body of record 1: the normalized policy and its digest.
type PolicyBody struct {
	Digest string          `json:"digest"`
	Policy json.RawMessage `json:"policy"`
}

// RecordedRequest is a request as the log keeps it.
type RecordedRequest struct {
	ID   string         `json:"id"`
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

// ActionBody is the body of an action record.
type ActionBody struct {
	Request RecordedRequest `json:"request"`
	Verdict Verdict         `json:"verdict"`
}

// ApprovalBody is the body of an approval (or rejection) record.
type ApprovalBody struct {
	RequestID string  `json:"request_id"`
	Approver  string  `json:"approver"`
	Approved  bool    `json:"approved"`
	Verdict   Verdict `json:"verdict"`
	// Note is the approver's note, at most 256 characters (docs/approvals.md).
	Note string `json:"note,omitempty"`
}

// TerminationBody is the body of the last record of a sealed log.
type TerminationBody struct {
	Reason Termination `json:"reason"`
	By     string      `json:"by,omitempty"`
	// Note is the free text a person gave with a kill switch (lineagec terminate --reason).
	Note string `json:"note,omitempty"`
}

// Status is whether an agent may still act.
type Status string

const (
	Alive      Status = "alive"
	Terminated Status = "terminated"
)

// State is an agent's folded log (docs/decision-order.md#folded-state).
type State struct {
	Agent       string                     `json:"agent"`
	Seq         uint64                     `json:"seq"`
	Head        string                     `json:"head"`
	Status      Status                     `json:"status"`
	Termination Termination                `json:"termination"`
	Budget      int64                      `json:"budget"`
	Spent       int64                      `json:"spent"`
	Remaining   int64                      `json:"remaining"`
	ScarScore   int64                      `json:"scar_score"`
	Scars       map[Severity]int64         `json:"scars"`
	Calls       map[string]int64           `json:"calls"`
	Window      []Time                     `json:"window"`
	Pending     map[string]RecordedRequest `json:"pending"`
}

// CELState is the type of the variable state in CEL constraints (docs/policy.md#cel-constraints):
// an object with typed fields, so that `state.remainin` or
// `state.remaining > 'ten'` is a compile error. The cel tags are the field
// names CEL sees.
type CELState struct {
	Budget    int64            `cel:"budget"`
	Spent     int64            `cel:"spent"`
	Remaining int64            `cel:"remaining"`
	ScarScore int64            `cel:"scar_score"`
	Calls     map[string]int64 `cel:"calls"`
}

// Time is a UTC timestamp that encodes with exactly nine fractional digits
// ("2026-11-30T01:02:03.000000004Z"), so a record's bytes never depend on how
// many trailing zeros a clock produced.
type Time struct{ time.Time }

// TimeLayout is the encoding of Time.
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// MarshalJSON encodes t in TimeLayout.
func (t Time) MarshalJSON() ([]byte, error) {
	return append(AppendTime(append(make([]byte, 0, len(TimeLayout)+2), '"'), t.Time), '"'), nil
}

// AppendTime appends t, in UTC, in TimeLayout: what a record's "at" holds.
// Records are sealed and opened by the million, so the years 0–9999 (every
// time the runtime holds) are written digit by digit rather than by time's
// layout interpreter; TestAppendTime holds the two equal.
func AppendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	var b [len(TimeLayout)]byte
	digits := func(at, v, n int) {
		for i := at + n - 1; i >= at; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
	}
	digits(0, year, 4)
	digits(5, int(month), 2)
	digits(8, day, 2)
	digits(11, hour, 2)
	digits(14, minute, 2)
	digits(17, sec, 2)
	digits(20, t.Nanosecond(), 9)
	b[4], b[7], b[10], b[13], b[16], b[19], b[29] = '-', '-', 'T', ':', ':', '.', 'Z'
	return append(dst, b[:]...)
}

// UnmarshalJSON accepts any RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("bad time %q: %w", s, err)
	}
	t.Time = v.UTC()
	return nil
}

// Errors callers branch on with errors.Is. Verdicts (even denials) are not errors.
var (
	// ErrBadRequest: the request is malformed; nothing was recorded (docs/decision-order.md).
	ErrBadRequest = errors.New("bad_request")
	// ErrIDConflict: the request id was used before with another tool or other args.
	ErrIDConflict = errors.New("id_conflict")
	// ErrSealed: the agent is terminated and its log takes no more records.
	ErrSealed = errors.New("sealed")
	// ErrNotPending: an approval names a request that is not pending (one the
	// agent never made matches ErrUnknownRequest too).
	ErrNotPending = errors.New("not_pending")
	// ErrBadApprover: the approver is empty or the agent itself.
	ErrBadApprover = errors.New("bad_approver")
	// ErrTimeBackwards: the time given is earlier than the log's last record.
	ErrTimeBackwards = errors.New("time_backwards")
	// ErrUnknownAgent: no log exists for the agent id.
	ErrUnknownAgent = errors.New("unknown_agent")
	// ErrCorrupt: a log failed verification.
	ErrCorrupt = errors.New("corrupt_log")
)
