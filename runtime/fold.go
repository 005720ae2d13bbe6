package runtime

import (
	"crypto/sha256"
	"encoding/json"

	gojson "github.com/goccy/go-json"

	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/strictjson"
)

// folded is an agent's state as the fold keeps it (docs/decision-order.md#folded-state), plus what the
// bookkeeping needs: the request ids seen (for idempotent retries) and the
// window of allowed times as a ring of the last max_actions.
type folded struct {
	agent       string
	name        string // the genesis name, which no approver may take (D52: approver names)
	seq         uint64
	head        string
	lastAt      time.Time
	status      lineage.Status
	termination lineage.Termination
	budget      int64
	spent       int64
	scarScore   int64
	scars       [3]int64 // minor, moderate, severe
	calls       map[string]int64
	pending     map[string]lineage.RecordedRequest
	// seen holds the requests with ids callers gave, auto those with ids the
	// runtime assigned (req_<seq>, D17 (assigned ids)) in seq order: most requests have one,
	// and an append costs no hashing and no map growth however long the log.
	// Values, not pointers: long logs hold millions, and the GC traces fewer objects.
	seen map[string]seenRequest
	auto []autoSeen
	// owed is the termination a verdict announced whose termination record is
	// not in the log (a crash between the two writes of one append): opening
	// the agent appends it.
	owed lineage.Termination

	digest     string
	policyDoc  json.RawMessage
	maxActions int     // 0: no rate limit
	window     []int64 // ring of allowed times (unix ns), len == maxActions when full
	windowNext int     // ring index of the oldest entry once full
}

// seenRequest is what a retry needs: the request's fingerprint (to detect an
// id_conflict) and the verdict that is current for it (D2: retries).
type seenRequest struct {
	fingerprint [32]byte
	verdict     lineage.Verdict
}

// autoSeen is a request whose id the runtime assigned: req_<seq>.
type autoSeen struct {
	seq uint64
	seenRequest
}

// assignedSeq returns n if id is req_<n> as the runtime writes it (D17: assigned ids).
func assignedSeq(id string) (uint64, bool) {
	digits, ok := strings.CutPrefix(id, "req_")
	if !ok || digits == "" || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

// lookup finds the request with this id, and where it is kept.
func (f *folded) lookup(id string) (s *seenRequest, ok bool) {
	if seq, isAuto := assignedSeq(id); isAuto {
		i := sort.Search(len(f.auto), func(i int) bool { return f.auto[i].seq >= seq })
		if i < len(f.auto) && f.auto[i].seq == seq {
			return &f.auto[i].seenRequest, true
		}
	}
	if v, ok := f.seen[id]; ok {
		return &v, true // a copy: setVerdict writes map entries back
	}
	return nil, false
}

// remember records a request's fingerprint and verdict, in the slice if the
// runtime assigned its id in this very record, else in the map.
func (f *folded) remember(id string, recSeq uint64, s seenRequest) {
	if seq, isAuto := assignedSeq(id); isAuto && seq == recSeq && (len(f.auto) == 0 || f.auto[len(f.auto)-1].seq < seq) {
		f.auto = append(f.auto, autoSeen{seq, s})
		return
	}
	f.seen[id] = s
}

// setVerdict changes the current verdict of a request (an approval's).
func (f *folded) setVerdict(id string, v lineage.Verdict) {
	s, ok := f.lookup(id)
	if !ok {
		return
	}
	s.verdict = v
	if _, inMap := f.seen[id]; inMap {
		f.seen[id] = *s
	}
}

func newFolded() *folded {
	return &folded{
		status:  lineage.Alive,
		calls:   map[string]int64{},
		pending: map[string]lineage.RecordedRequest{},
		seen:    map[string]seenRequest{},
	}
}

// fingerprint identifies a request's content: its tool and canonical args.
func fingerprint(tool string, canonArgs []byte) [32]byte {
	if n := len(tool) + 1 + len(canonArgs); n <= 256 { // most requests: no hasher on the heap
		var buf [256]byte
		copy(buf[copy(buf[:], tool)+1:], canonArgs)
		return sha256.Sum256(buf[:n])
	}
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canonArgs)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// fold applies one record to the state. It is the only code that changes
// state: replaying a log and appending to it both go through here, so live
// state equals a full replay by construction. body is the record's decoded
// body; for an action, canonArgs is its args' canonical JSON (as in the record).
func (f *folded) fold(rec lineage.Record, body any, canonArgs []byte) error {
	switch b := body.(type) {
	case *lineage.GenesisBody:
		f.agent, f.name = b.Agent, b.Name
	case *lineage.PolicyBody:
		var p struct {
			Budget    int64 `json:"budget"`
			RateLimit *struct {
				MaxActions int64 `json:"max_actions"`
			} `json:"rate_limit"`
		}
		// The policy as recorded, its members matched exactly (a rehashed
		// "Budget" is not the budget), D372 (records' policies read strictly).
		if err := strictjson.UnmarshalOpen(b.Policy, &p, 0); err != nil {
			return fmt.Errorf("policy record: %w", err)
		}
		f.digest, f.policyDoc, f.budget = b.Digest, b.Policy, p.Budget
		if p.RateLimit != nil && p.RateLimit.MaxActions > 0 {
			f.maxActions = int(p.RateLimit.MaxActions)
		}
	case *lineage.ActionBody:
		v := b.Verdict
		f.remember(b.Request.ID, rec.Seq, seenRequest{fingerprint: fingerprint(b.Request.Tool, canonArgs), verdict: v})
		f.owed = v.Terminated
		switch v.Decision {
		case lineage.Allow:
			f.allowed(b.Request.Tool, v.Cost, rec.At.Time)
		case lineage.Pending:
			f.pending[b.Request.ID] = b.Request
		case lineage.Deny:
			if v.Scar != nil {
				f.scarScore += v.Scar.Weight
				f.scars[severityIndex(v.Scar.Severity)]++
			}
		}
	case *lineage.ApprovalBody:
		req, ok := f.pending[b.RequestID]
		if !ok {
			return fmt.Errorf("approval of %q, which is not pending", b.RequestID)
		}
		delete(f.pending, b.RequestID)
		v := b.Verdict
		v.Note = b.Note // what a retry and the request's verdict answer (docs/approvals.md)
		f.setVerdict(b.RequestID, v)
		if b.Verdict.Decision == lineage.Allow {
			f.allowed(req.Tool, b.Verdict.Cost, rec.At.Time)
		}
		f.owed = b.Verdict.Terminated
	case *lineage.TerminationBody:
		f.status, f.termination, f.owed = lineage.Terminated, b.Reason, ""
		clear(f.pending) // D11 (pending is void at termination): pending requests are void
	default:
		return fmt.Errorf("unknown record body %T", body)
	}
	f.seq, f.head, f.lastAt = rec.Seq, rec.Hash, rec.At.Time
	return nil
}

func (f *folded) allowed(tool string, cost int64, at time.Time) {
	f.spent += cost
	f.calls[tool]++
	if f.maxActions == 0 {
		return
	}
	ns := at.UnixNano()
	if len(f.window) < f.maxActions {
		f.window = append(f.window, ns)
		return
	}
	f.window[f.windowNext] = ns
	f.windowNext = (f.windowNext + 1) % f.maxActions
}

// rateKth is the time of the max_actions-th most recent allowed action, if
// there have been that many: its age is the one number the Rego's rate check
// compares with the window.
func (f *folded) rateKth() (int64, bool) {
	if f.maxActions == 0 || len(f.window) < f.maxActions {
		return 0, false
	}
	return f.window[f.windowNext], true
}

func severityIndex(s lineage.Severity) int {
	switch s {
	case lineage.Minor:
		return 0
	case lineage.Moderate:
		return 1
	default:
		return 2
	}
}

func argsOrEmpty(a map[string]any) map[string]any {
	if a == nil {
		return map[string]any{}
	}
	return a
}

// decodeBody parses a record's body by its kind; for an action it also returns
// the args' canonical JSON (the body is canonical, so the bytes as stored), and
// decodes the args themselves only when the request is pending (the state keeps
// pending requests whole; for the rest the fingerprint is enough).
func decodeBody(rec lineage.Record) (body any, canonArgs []byte, err error) {
	if rec.Kind == lineage.KindAction {
		var raw struct {
			Request struct {
				ID   string          `json:"id"`
				Tool string          `json:"tool"`
				Args json.RawMessage `json:"args"`
			} `json:"request"`
			Verdict lineage.Verdict `json:"verdict"`
		}
		// Action bodies are most of a log, and decoding them is most of a
		// replay: goccy/go-json (about three times as fast here as the one
		// reader) keeps opening a long log quick, D374 (action bodies in a
		// replay stay on goccy/go-json). It is safe: bodyIsCanonical
		// re-encodes what was decoded and compares bytes, so a case-folded,
		// duplicate or unknown member is refused. Args stay raw.
		if err := gojson.Unmarshal(rec.Body, &raw); err != nil {
			return nil, nil, fmt.Errorf("action body: %w", err)
		}
		b := &lineage.ActionBody{
			Request: lineage.RecordedRequest{ID: raw.Request.ID, Tool: raw.Request.Tool},
			Verdict: raw.Verdict,
		}
		if len(raw.Request.Args) == 0 || raw.Request.Args[0] != '{' {
			return nil, nil, fmt.Errorf("action body: args must be an object")
		}
		if raw.Verdict.Decision == lineage.Pending {
			if err := strictDecode(raw.Request.Args, &b.Request.Args); err != nil {
				return nil, nil, fmt.Errorf("action body: args: %w", err)
			}
		}
		return b, raw.Request.Args, nil
	}
	switch rec.Kind {
	case lineage.KindGenesis:
		body = &lineage.GenesisBody{}
	case lineage.KindPolicy:
		body = &lineage.PolicyBody{}
	case lineage.KindApproval:
		body = &lineage.ApprovalBody{}
	case lineage.KindTermination:
		body = &lineage.TerminationBody{}
	default:
		return nil, nil, fmt.Errorf("unknown record kind %q", rec.Kind)
	}
	if err := strictDecode(rec.Body, body); err != nil {
		return nil, nil, fmt.Errorf("%s body: %w", rec.Kind, err)
	}
	if b, ok := body.(*lineage.ApprovalBody); ok && b.Verdict.Note != "" {
		return nil, nil, fmt.Errorf("approval body: /verdict/note: unknown field (the note is the body's)")
	}
	return body, nil, nil
}

// strictDecode reads a record's body (or a pending request's args) with the
// one strict reader: member names exactly, no unknown or duplicate member,
// numbers as json.Number.
func strictDecode(b []byte, into any) error {
	return strictjson.Unmarshal(b, into, 0)
}

// State returns the docs/decision-order.md#folded-state view of the fold (a copy).
func (f *folded) State() lineage.State {
	s := lineage.State{
		Agent: f.agent, Seq: f.seq, Head: f.head, Status: f.status, Termination: f.termination,
		Budget: f.budget, Spent: f.spent, Remaining: f.budget - f.spent, ScarScore: f.scarScore,
		Scars: map[lineage.Severity]int64{
			lineage.Minor: f.scars[0], lineage.Moderate: f.scars[1], lineage.Severe: f.scars[2]},
		Calls:   make(map[string]int64, len(f.calls)),
		Window:  make([]lineage.Time, 0, len(f.window)),
		Pending: make(map[string]lineage.RecordedRequest, len(f.pending)),
	}
	for k, v := range f.calls {
		s.Calls[k] = v
	}
	for i := range f.window {
		idx := i
		if len(f.window) == f.maxActions {
			idx = (f.windowNext + i) % f.maxActions
		}
		s.Window = append(s.Window, lineage.Time{Time: time.Unix(0, f.window[idx]).UTC()})
	}
	for k, v := range f.pending {
		s.Pending[k] = v
	}
	return s
}
