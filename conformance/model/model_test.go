package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// genesis is the runner's genesis time (D9: conformance time).
var genesis = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is genesis + secs seconds (fractions allowed, as in case files).
func at(secs float64) time.Time { return genesis.Add(time.Duration(secs * float64(time.Second))) }

// normalize fills the defaults of docs/policy.md / D16 (normalization) the way the compiler does.
func normalize(p policy.Policy) policy.Policy {
	if p.ScarLimit == nil {
		l := int64(policy.DefaultScarLimit)
		p.ScarLimit = &l
	}
	if p.ScarWeights == nil {
		p.ScarWeights = &policy.ScarWeights{Minor: policy.DefaultMinor, Moderate: policy.DefaultModerate, Severe: policy.DefaultSevere}
	}
	if p.Tools == nil {
		p.Tools = map[string]policy.ToolRule{}
	}
	fill := func(r policy.ToolRule) policy.ToolRule {
		w := make([]policy.Constraint, len(r.When))
		for i, c := range r.When {
			if c.Scar == "" {
				c.Scar = "moderate"
			}
			w[i] = c
		}
		r.When = w
		return r
	}
	tools := map[string]policy.ToolRule{}
	for k, r := range p.Tools {
		tools[k] = fill(r)
	}
	p.Tools = tools
	if p.DefaultRule != nil {
		r := fill(*p.DefaultRule)
		p.DefaultRule = &r
	}
	return p
}

func newModel(t *testing.T, p policy.Policy) *Model {
	t.Helper()
	m, err := New("agt_test", normalize(p), genesis)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// step is one action against a model, with what the verdict and state after it
// must show. Empty expectations are not compared.
type step struct {
	// exactly one of these
	req       *lineage.Request // At taken from secs
	approve   string
	reject    string
	terminate string

	secs float64
	by   string // approver (default "alice")

	err error // expected error (errors.Is)

	decision   lineage.Decision
	reason     string
	cost       *int64
	scar       string // severity, or "none"
	terminated lineage.Termination
	requestID  string
	seq        uint64

	remaining *int64
	scarScore *int64
	status    lineage.Status
	stateSeq  uint64
}

func i64(v int64) *int64 { return &v }

func req(tool string, args map[string]any) *lineage.Request {
	return &lineage.Request{Tool: tool, Args: args}
}

func reqID(id, tool string, args map[string]any) *lineage.Request {
	return &lineage.Request{ID: id, Tool: tool, Args: args}
}

func run(t *testing.T, m *Model, steps []step) {
	t.Helper()
	for i, s := range steps {
		before := m.State()
		var v lineage.Verdict
		var err error
		isVerdict := true
		by := s.by
		if by == "" {
			by = "alice"
		}
		switch {
		case s.req != nil:
			r := *s.req
			r.At = at(s.secs)
			v, err = m.Request(r)
		case s.approve != "":
			v, err = m.Approve(s.approve, by, at(s.secs))
		case s.reject != "":
			v, err = m.Reject(s.reject, by, at(s.secs))
		case s.terminate != "":
			err = m.Terminate(s.terminate, at(s.secs))
			isVerdict = false
		default:
			t.Fatalf("step %d: no action", i)
		}
		if s.err != nil {
			if !errors.Is(err, s.err) {
				t.Fatalf("step %d: err = %v, want %v", i, err, s.err)
			}
			if after := m.State(); !statesEqual(before, after) {
				t.Fatalf("step %d: an error changed the state:\nbefore %+v\nafter  %+v", i, before, after)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: unexpected error %v", i, err)
		}
		if isVerdict {
			checkVerdict(t, i, v, s)
		}
		st := m.State()
		if s.remaining != nil && st.Remaining != *s.remaining {
			t.Errorf("step %d: remaining = %d, want %d", i, st.Remaining, *s.remaining)
		}
		if s.scarScore != nil && st.ScarScore != *s.scarScore {
			t.Errorf("step %d: scar_score = %d, want %d", i, st.ScarScore, *s.scarScore)
		}
		if s.status != "" && st.Status != s.status {
			t.Errorf("step %d: status = %s, want %s", i, st.Status, s.status)
		}
		if s.stateSeq != 0 && st.Seq != s.stateSeq {
			t.Errorf("step %d: state seq = %d, want %d", i, st.Seq, s.stateSeq)
		}
	}
}

func checkVerdict(t *testing.T, i int, v lineage.Verdict, s step) {
	t.Helper()
	if s.decision != "" && v.Decision != s.decision {
		t.Errorf("step %d: decision = %s, want %s (verdict %+v)", i, v.Decision, s.decision, v)
	}
	if s.reason != "" && v.Reason != s.reason {
		t.Errorf("step %d: reason = %q, want %q", i, v.Reason, s.reason)
	}
	if s.cost != nil && v.Cost != *s.cost {
		t.Errorf("step %d: cost = %d, want %d", i, v.Cost, *s.cost)
	}
	switch {
	case s.scar == "":
	case s.scar == "none":
		if v.Scar != nil {
			t.Errorf("step %d: scar = %+v, want none", i, *v.Scar)
		}
	default:
		if v.Scar == nil || string(v.Scar.Severity) != s.scar {
			t.Errorf("step %d: scar = %+v, want %s", i, v.Scar, s.scar)
		}
	}
	if v.Terminated != s.terminated {
		t.Errorf("step %d: terminated = %q, want %q", i, v.Terminated, s.terminated)
	}
	if s.requestID != "" && v.RequestID != s.requestID {
		t.Errorf("step %d: request_id = %q, want %q", i, v.RequestID, s.requestID)
	}
	if s.seq != 0 && v.Seq != s.seq {
		t.Errorf("step %d: seq = %d, want %d", i, v.Seq, s.seq)
	}
}

func statesEqual(a, b lineage.State) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestScenarios(t *testing.T) {
	payWire := policy.Policy{Budget: 3, Tools: map[string]policy.ToolRule{
		"pay":  {Cost: 1},
		"wire": {Cost: 1, RequiresApproval: true},
	}}
	never := func(scar string) policy.Policy {
		return policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
			"bad": {Cost: 0, When: []policy.Constraint{{Expr: "false", Reason: "never", Scar: scar}}},
		}}
	}
	amount := policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
		"pay": {Cost: 0, When: []policy.Constraint{{Expr: "args.amount <= 100", Reason: "amount_over_limit"}}},
	}}

	cases := []struct {
		name  string
		p     policy.Policy
		steps []step
		state func(t *testing.T, s lineage.State)
	}{
		{
			name: "decision order: three unlisted-tool attempts leave 9, the fourth terminates",
			p:    policy.Policy{Budget: 10},
			steps: []step{
				{req: req("x", nil), secs: 1, decision: lineage.Deny, reason: "unlisted_tool", scar: "moderate", scarScore: i64(3), seq: 2, status: lineage.Alive},
				{req: req("x", nil), secs: 2, decision: lineage.Deny, reason: "unlisted_tool", scar: "moderate", scarScore: i64(6), seq: 3},
				{req: req("x", nil), secs: 3, decision: lineage.Deny, reason: "unlisted_tool", scar: "moderate", scarScore: i64(9), seq: 4, status: lineage.Alive},
				{req: req("x", nil), secs: 4, decision: lineage.Deny, reason: "unlisted_tool", scar: "moderate", scarScore: i64(12),
					terminated: lineage.ScarLimitReached, seq: 5, requestID: "req_5", stateSeq: 6, status: lineage.Terminated},
				// Step 2: nothing appended, seq 0, request_id as given (D4: refusals that are not recorded).
				{req: req("x", nil), secs: 5, decision: lineage.Deny, reason: "terminated", scar: "none", requestID: "", stateSeq: 6},
				{req: reqID("late", "x", nil), secs: 5, decision: lineage.Deny, reason: "terminated", requestID: "late", stateSeq: 6},
			},
			state: func(t *testing.T, s lineage.State) {
				if s.Scars[lineage.Moderate] != 4 || s.Scars[lineage.Minor] != 0 || s.Scars[lineage.Severe] != 0 {
					t.Errorf("scars = %v", s.Scars)
				}
				if s.Termination != lineage.ScarLimitReached {
					t.Errorf("termination = %q", s.Termination)
				}
			},
		},
		{
			name: "decision order: one severe incident terminates at once",
			p:    never("severe"),
			steps: []step{
				{req: req("bad", nil), secs: 1, decision: lineage.Deny, reason: "never", scar: "severe", scarScore: i64(10),
					terminated: lineage.ScarLimitReached, seq: 2, stateSeq: 3, status: lineage.Terminated},
			},
		},
		{
			name: "scar none adds nothing (D5)",
			p:    never("none"),
			steps: []step{
				{req: req("bad", nil), secs: 1, decision: lineage.Deny, reason: "never", scar: "none", scarScore: i64(0)},
				{req: req("bad", nil), secs: 1, decision: lineage.Deny, reason: "never", scar: "none", scarScore: i64(0), stateSeq: 3, status: lineage.Alive},
			},
		},
		{
			name: "minor scars with custom weights and limit",
			p: policy.Policy{Budget: 10, ScarLimit: i64(2), ScarWeights: &policy.ScarWeights{Minor: 1, Moderate: 5, Severe: 7},
				Tools: map[string]policy.ToolRule{"t": {Cost: 0, MaxCalls: i64(1)}}},
			steps: []step{
				{req: req("t", nil), secs: 1, decision: lineage.Allow},
				{req: req("t", nil), secs: 1, decision: lineage.Deny, reason: "max_calls_exceeded", scar: "minor", scarScore: i64(1)},
				{req: req("t", nil), secs: 1, decision: lineage.Deny, reason: "max_calls_exceeded", scar: "minor", scarScore: i64(2), terminated: lineage.ScarLimitReached},
			},
		},
		{
			name: "docs/cases.md example: budget exhausted terminates",
			p:    payWire,
			steps: []step{
				{req: req("pay", nil), secs: 0, decision: lineage.Allow, reason: "ok", cost: i64(1), remaining: i64(2), seq: 2, requestID: "req_2"},
				{req: reqID("w1", "wire", nil), secs: 1.5, decision: lineage.Pending, reason: "approval_required", cost: i64(0), remaining: i64(2), seq: 3, requestID: "w1"},
				{approve: "w1", secs: 2, decision: lineage.Allow, reason: "ok", cost: i64(1), remaining: i64(1), seq: 4, requestID: "w1"},
				{reject: "w9", secs: 2, err: lineage.ErrNotPending},
				{req: req("pay", nil), secs: 3, decision: lineage.Allow, cost: i64(1), terminated: lineage.BudgetExhausted, remaining: i64(0), seq: 5, stateSeq: 6},
				{req: req("pay", nil), secs: 4, decision: lineage.Deny, reason: "terminated", seq: 0},
			},
			state: func(t *testing.T, s lineage.State) {
				if s.Remaining != 0 || s.Spent != 3 || s.Status != lineage.Terminated || s.Termination != lineage.BudgetExhausted {
					t.Errorf("state = %+v", s)
				}
				if len(s.Calls) != 2 || s.Calls["pay"] != 2 || s.Calls["wire"] != 1 {
					t.Errorf("calls = %v, want pay 2, wire 1", s.Calls)
				}
			},
		},
		{
			name: "docs/cases.md example: kill switch",
			p:    payWire,
			steps: []step{
				{terminate: "ops", secs: 1, status: lineage.Terminated, stateSeq: 2},
				{req: req("pay", nil), secs: 2, decision: lineage.Deny, reason: "terminated"},
				{terminate: "ops", secs: 3, err: lineage.ErrSealed},
			},
			state: func(t *testing.T, s lineage.State) {
				if s.Termination != lineage.Killed || s.Remaining != 3 {
					t.Errorf("state = %+v", s)
				}
			},
		},
		{
			name: "budget exactly zero: a paid tool is refused without scar, a free one is allowed",
			p: policy.Policy{Budget: 0, Tools: map[string]policy.ToolRule{
				"pay": {Cost: 1}, "free": {Cost: 0},
			}},
			steps: []step{
				{req: req("pay", nil), secs: 1, decision: lineage.Deny, reason: "insufficient_budget", scar: "none", scarScore: i64(0), status: lineage.Alive},
				{req: req("free", nil), secs: 2, decision: lineage.Allow, cost: i64(0), remaining: i64(0), status: lineage.Alive},
				{req: req("free", nil), secs: 3, decision: lineage.Allow, cost: i64(0), remaining: i64(0), status: lineage.Alive, stateSeq: 4},
			},
			state: func(t *testing.T, s lineage.State) {
				if s.Calls["free"] != 2 {
					t.Errorf("calls = %v", s.Calls)
				}
				if _, ok := s.Calls["pay"]; ok {
					t.Errorf("calls lists pay without an allowed call: %v", s.Calls)
				}
			},
		},
		{
			name: "spending the budget to exactly zero terminates; a bigger cost is refused first",
			p:    policy.Policy{Budget: 5, Tools: map[string]policy.ToolRule{"pay": {Cost: 3}, "small": {Cost: 2}}},
			steps: []step{
				{req: req("pay", nil), secs: 1, decision: lineage.Allow, cost: i64(3), remaining: i64(2)},
				{req: req("pay", nil), secs: 2, decision: lineage.Deny, reason: "insufficient_budget", scar: "none", remaining: i64(2)},
				{req: req("small", nil), secs: 3, decision: lineage.Allow, cost: i64(2), remaining: i64(0), terminated: lineage.BudgetExhausted, seq: 4, stateSeq: 5},
			},
		},
		{
			name: "rate window is half-open: an action exactly window_secs earlier no longer counts",
			p: policy.Policy{Budget: 100, RateLimit: &policy.RateLimit{MaxActions: 2, WindowSecs: 10},
				Tools: map[string]policy.ToolRule{"t": {Cost: 0}, "slow": {Cost: 0, RequiresApproval: true}}},
			steps: []step{
				{req: req("t", nil), secs: 0, decision: lineage.Allow},
				{req: reqID("p", "slow", nil), secs: 0.5, decision: lineage.Pending}, // pending never counts
				{req: req("t", nil), secs: 1, decision: lineage.Allow},
				{req: req("t", nil), secs: 9.999999999, decision: lineage.Deny, reason: "rate_limited", scar: "minor", scarScore: i64(1)},
				{req: req("t", nil), secs: 10, decision: lineage.Allow}, // the action at 0 is out: 10 - 10 < 0 is false
				{req: req("t", nil), secs: 10.5, decision: lineage.Deny, reason: "rate_limited"},
				{req: req("t", nil), secs: 11, decision: lineage.Allow}, // denied actions never count
			},
			state: func(t *testing.T, s lineage.State) {
				if len(s.Window) != 2 || !s.Window[0].Equal(at(10)) || !s.Window[1].Equal(at(11)) {
					t.Errorf("window = %v, want [10s 11s]", s.Window)
				}
			},
		},
		{
			name: "approvals are windowed at approval time (D8)",
			p: policy.Policy{Budget: 100, RateLimit: &policy.RateLimit{MaxActions: 1, WindowSecs: 10},
				Tools: map[string]policy.ToolRule{"t": {Cost: 0}, "slow": {Cost: 0, RequiresApproval: true}}},
			steps: []step{
				{req: reqID("p", "slow", nil), secs: 0, decision: lineage.Pending},
				{req: req("t", nil), secs: 1, decision: lineage.Allow},
				// At 5 the window holds the action at 1: the re-check denies, no scar.
				{approve: "p", secs: 5, decision: lineage.Deny, reason: "rate_limited", scar: "none", scarScore: i64(0)},
				// A request that would be pending is rate-limited like any other (step 4 before 8).
				{req: reqID("q", "slow", nil), secs: 6, decision: lineage.Deny, reason: "rate_limited", scar: "minor"},
				{req: reqID("r", "slow", nil), secs: 11, decision: lineage.Pending},
				{approve: "r", secs: 19, decision: lineage.Allow},
				// The approval at 19 counts, not the request at 11.
				{req: req("t", nil), secs: 22, decision: lineage.Deny, reason: "rate_limited", scar: "minor"},
				{req: req("t", nil), secs: 29, decision: lineage.Allow},
			},
		},
		{
			name: "approval re-check denies on budget without scar",
			p: policy.Policy{Budget: 3, Tools: map[string]policy.ToolRule{
				"pay": {Cost: 2}, "wire": {Cost: 2, RequiresApproval: true},
			}},
			steps: []step{
				{req: reqID("w", "wire", nil), secs: 1, decision: lineage.Pending, remaining: i64(3)},
				{req: req("pay", nil), secs: 2, decision: lineage.Allow, remaining: i64(1)},
				{approve: "w", secs: 3, decision: lineage.Deny, reason: "insufficient_budget", scar: "none", cost: i64(0),
					scarScore: i64(0), remaining: i64(1), status: lineage.Alive, seq: 4, requestID: "w"},
				{approve: "w", secs: 4, err: lineage.ErrNotPending},
				// Retrying the request returns the approval's verdict (D2: retries).
				{req: reqID("w", "wire", nil), secs: 5, decision: lineage.Deny, reason: "insufficient_budget", seq: 4, stateSeq: 4},
			},
			state: func(t *testing.T, s lineage.State) {
				if len(s.Pending) != 0 {
					t.Errorf("pending = %v", s.Pending)
				}
				if _, ok := s.Calls["wire"]; ok {
					t.Errorf("calls = %v", s.Calls)
				}
			},
		},
		{
			name: "approval re-check of a severe constraint denies with no scar and no termination",
			p: policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
				"pay": {Cost: 1},
				"wire": {Cost: 1, RequiresApproval: true, When: []policy.Constraint{
					{Expr: "state.spent == 0 && now < timestamp('2026-01-01T00:01:00Z')", Reason: "too_late", Scar: "severe"},
				}},
			}},
			steps: []step{
				{req: reqID("a", "wire", nil), secs: 1, decision: lineage.Pending},
				{req: reqID("b", "wire", nil), secs: 1, decision: lineage.Pending},
				{req: req("pay", nil), secs: 2, decision: lineage.Allow},
				{approve: "a", secs: 3, decision: lineage.Deny, reason: "too_late", scar: "none", scarScore: i64(0), status: lineage.Alive},
				{reject: "b", secs: 61, decision: lineage.Deny, reason: "approval_rejected", scar: "none", cost: i64(0), status: lineage.Alive},
			},
		},
		{
			name: "CEL now is the approval time",
			p: policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
				"wire": {Cost: 1, RequiresApproval: true, When: []policy.Constraint{
					{Expr: "now < timestamp('2026-01-01T00:01:00Z')", Reason: "too_late"},
				}},
			}},
			steps: []step{
				{req: reqID("a", "wire", nil), secs: 1, decision: lineage.Pending},
				{req: reqID("b", "wire", nil), secs: 2, decision: lineage.Pending},
				{approve: "a", secs: 59.999999999, decision: lineage.Allow, remaining: i64(9)},
				{approve: "b", secs: 60, decision: lineage.Deny, reason: "too_late", scar: "none", remaining: i64(9)},
			},
		},
		{
			name: "retries return the current verdict and append nothing",
			p:    payWire,
			steps: []step{
				{req: reqID("a", "pay", map[string]any{"n": json.Number("1"), "s": "x"}), secs: 1, decision: lineage.Allow, seq: 2, remaining: i64(2)},
				// Same id, same JSON value (1.0 == 1, key order irrelevant): retry, nothing charged.
				{req: reqID("a", "pay", map[string]any{"s": "x", "n": json.Number("1.0")}), secs: 2, decision: lineage.Allow, cost: i64(1), seq: 2, remaining: i64(2), stateSeq: 2},
				{req: reqID("w", "wire", nil), secs: 3, decision: lineage.Pending, seq: 3},
				{req: reqID("w", "wire", map[string]any{}), secs: 3, decision: lineage.Pending, reason: "approval_required", seq: 3, stateSeq: 3},
				{approve: "w", secs: 4, decision: lineage.Allow, seq: 4, remaining: i64(1)},
				{req: reqID("w", "wire", nil), secs: 5, decision: lineage.Allow, reason: "ok", cost: i64(1), seq: 4, stateSeq: 4, remaining: i64(1)},
				{req: reqID("last", "pay", nil), secs: 6, decision: lineage.Allow, terminated: lineage.BudgetExhausted, seq: 5, stateSeq: 6},
				// Step 1 comes before step 2: retries are answered after termination (D2: retries).
				{req: reqID("last", "pay", nil), secs: 7, decision: lineage.Allow, terminated: lineage.BudgetExhausted, seq: 5, stateSeq: 6},
				{req: reqID("a", "pay", map[string]any{"n": json.Number("1e0"), "s": "x"}), secs: 7, decision: lineage.Allow, seq: 2},
				{req: reqID("a", "pay", map[string]any{"n": json.Number("2"), "s": "x"}), secs: 7, err: lineage.ErrIDConflict},
			},
		},
		{
			name: "a pending request voided by termination is retried as deny terminated",
			p:    payWire,
			steps: []step{
				{req: reqID("w", "wire", nil), secs: 1, decision: lineage.Pending, seq: 2},
				{terminate: "ops", secs: 2, stateSeq: 3},
				{req: reqID("w", "wire", nil), secs: 1, decision: lineage.Deny, reason: "terminated"},
				{approve: "w", secs: 3, err: lineage.ErrSealed},
			},
		},
		{
			name: "id_conflict: another tool or other args",
			p:    payWire,
			steps: []step{
				{req: reqID("a", "pay", map[string]any{"n": json.Number("1")}), secs: 1, decision: lineage.Allow},
				{req: reqID("a", "wire", map[string]any{"n": json.Number("1")}), secs: 1, err: lineage.ErrIDConflict},
				{req: reqID("a", "pay", map[string]any{"n": "1"}), secs: 1, err: lineage.ErrIDConflict},
				{req: reqID("a", "pay", nil), secs: 1, err: lineage.ErrIDConflict},
				{req: reqID("a", "pay", map[string]any{"n": json.Number("1"), "m": nil}), secs: 1, err: lineage.ErrIDConflict},
				{req: reqID("b", "pay", nil), secs: 1, decision: lineage.Allow, seq: 3},
				{req: reqID("b", "pay", map[string]any{"x": []any{}}), secs: 1, err: lineage.ErrIDConflict},
			},
		},
		{
			name: "sealed log: approvals, rejections and kills are errors; pending is void",
			p:    payWire,
			steps: []step{
				{req: reqID("w", "wire", nil), secs: 1, decision: lineage.Pending},
				{req: reqID("v", "wire", nil), secs: 1, decision: lineage.Pending},
				{terminate: "ops", secs: 2, status: lineage.Terminated},
				{approve: "w", secs: 3, err: lineage.ErrSealed},
				{reject: "v", secs: 3, err: lineage.ErrSealed},
				{approve: "unknown", secs: 3, err: lineage.ErrSealed},
				{terminate: "ops", secs: 3, err: lineage.ErrSealed},
			},
			state: func(t *testing.T, s lineage.State) {
				if len(s.Pending) != 0 || s.Seq != 4 {
					t.Errorf("state = %+v", s)
				}
			},
		},
		{
			name: "approvers and not_pending",
			p:    payWire,
			steps: []step{
				{req: reqID("w", "wire", nil), secs: 1, decision: lineage.Pending},
				{req: reqID("p", "pay", nil), secs: 1, decision: lineage.Allow},
				{approve: "w", by: "agt_test", secs: 2, err: lineage.ErrBadApprover},
				{reject: "p", secs: 2, err: lineage.ErrNotPending},
				{approve: "nope", secs: 2, err: lineage.ErrNotPending},
				{reject: "w", by: "bob", secs: 2, decision: lineage.Deny, reason: "approval_rejected", scar: "none", seq: 4},
				{reject: "w", by: "bob", secs: 2, err: lineage.ErrNotPending},
				{req: reqID("w", "wire", nil), secs: 2, decision: lineage.Deny, reason: "approval_rejected", seq: 4},
			},
		},
		{
			name: "CEL fails closed on a missing arg",
			p:    amount,
			steps: []step{
				{req: req("pay", nil), secs: 1, decision: lineage.Deny, reason: "amount_over_limit", scar: "moderate", scarScore: i64(3)},
				{req: req("pay", map[string]any{"amount": "5"}), secs: 1, decision: lineage.Deny, reason: "amount_over_limit", scar: "moderate"},
				{req: req("pay", map[string]any{"amount": json.Number("5")}), secs: 1, decision: lineage.Allow},
			},
		},
		{
			name: "CEL compares int and double",
			p:    amount,
			steps: []step{
				{req: req("pay", map[string]any{"amount": json.Number("99.5")}), secs: 1, decision: lineage.Allow},
				{req: req("pay", map[string]any{"amount": json.Number("100")}), secs: 1, decision: lineage.Allow},
				{req: req("pay", map[string]any{"amount": json.Number("1e2")}), secs: 1, decision: lineage.Allow},
				{req: req("pay", map[string]any{"amount": json.Number("100.5")}), secs: 1, decision: lineage.Deny, reason: "amount_over_limit"},
				{req: req("pay", map[string]any{"amount": json.Number("101")}), secs: 1, decision: lineage.Deny, reason: "amount_over_limit"},
			},
		},
		{
			name: "CEL compares statically typed int and double",
			p: policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
				"t": {Cost: 0, When: []policy.Constraint{{Expr: "size(args) < 1.5 && 2 > 1.5", Reason: "too_many_args"}}},
			}},
			steps: []step{
				{req: req("t", map[string]any{"a": true}), secs: 1, decision: lineage.Allow},
				{req: req("t", map[string]any{"a": true, "b": false}), secs: 1, decision: lineage.Deny, reason: "too_many_args"},
			},
		},
		{
			name: "CEL ints and doubles by text; dyn non-bool results are violations",
			p: policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
				"i": {Cost: 0, When: []policy.Constraint{{Expr: "type(args.n) == int", Reason: "not_int"}}},
				"f": {Cost: 0, When: []policy.Constraint{{Expr: "args.flag", Reason: "no_flag", Scar: "none"}}},
			}},
			steps: []step{
				{req: req("i", map[string]any{"n": json.Number("7")}), secs: 1, decision: lineage.Allow},
				{req: req("i", map[string]any{"n": json.Number("7.0")}), secs: 1, decision: lineage.Deny, reason: "not_int"},
				{req: req("i", map[string]any{"n": json.Number("7e0")}), secs: 1, decision: lineage.Deny, reason: "not_int"},
				{req: req("f", map[string]any{"flag": true}), secs: 1, decision: lineage.Allow},
				{req: req("f", map[string]any{"flag": "true"}), secs: 1, decision: lineage.Deny, reason: "no_flag"},
				{req: req("f", map[string]any{"flag": json.Number("1")}), secs: 1, decision: lineage.Deny, reason: "no_flag"},
			},
		},
		{
			name: "constraints run in order; the first failure decides; budget comes after",
			p: policy.Policy{Budget: 0, Tools: map[string]policy.ToolRule{
				"t": {Cost: 1, When: []policy.Constraint{
					{Expr: "tool == 't'", Reason: "first", Scar: "severe"},
					{Expr: "args.a > 0", Reason: "second", Scar: "minor"},
					{Expr: "args.a > 1", Reason: "third", Scar: "moderate"},
				}},
			}},
			steps: []step{
				{req: req("t", map[string]any{"a": json.Number("0")}), secs: 1, decision: lineage.Deny, reason: "second", scar: "minor"},
				{req: req("t", map[string]any{"a": json.Number("1")}), secs: 1, decision: lineage.Deny, reason: "third", scar: "moderate"},
				{req: req("t", map[string]any{"a": json.Number("2")}), secs: 1, decision: lineage.Deny, reason: "insufficient_budget", scar: "none", scarScore: i64(4)},
			},
		},
		{
			name: "CEL sees the state",
			p: policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{
				"t": {Cost: 2, When: []policy.Constraint{{
					Expr:   "state.budget == 10 && state.remaining == state.budget - state.spent && state.scar_score == 0 && (!('t' in state.calls) || state.calls['t'] < 2)",
					Reason: "state", Scar: "none"}}},
			}},
			steps: []step{
				{req: req("t", nil), secs: 1, decision: lineage.Allow},
				{req: req("t", nil), secs: 1, decision: lineage.Allow},
				{req: req("t", nil), secs: 1, decision: lineage.Deny, reason: "state"},
			},
		},
		{
			name: "order of checks: rate limit before constraints",
			p: policy.Policy{Budget: 10, RateLimit: &policy.RateLimit{MaxActions: 1, WindowSecs: 5},
				Tools: map[string]policy.ToolRule{"t": {Cost: 0, MaxCalls: i64(1), When: []policy.Constraint{{Expr: "false", Reason: "c"}}},
					"u": {Cost: 0}}},
			steps: []step{
				{req: req("u", nil), secs: 0, decision: lineage.Allow},
				{req: req("t", nil), secs: 1, decision: lineage.Deny, reason: "rate_limited"},
				{req: req("t", nil), secs: 5, decision: lineage.Deny, reason: "c"},
			},
		},
		{
			name: "max_calls counts default-rule tools per name",
			p:    policy.Policy{Budget: 10, DefaultRule: &policy.ToolRule{Cost: 1, MaxCalls: i64(1)}},
			steps: []step{
				{req: req("a", nil), secs: 1, decision: lineage.Allow, cost: i64(1)},
				{req: req("b", nil), secs: 1, decision: lineage.Allow},
				{req: req("a", nil), secs: 1, decision: lineage.Deny, reason: "max_calls_exceeded", scar: "minor"},
			},
			state: func(t *testing.T, s lineage.State) {
				if len(s.Calls) != 2 || s.Calls["a"] != 1 || s.Calls["b"] != 1 {
					t.Errorf("calls = %v", s.Calls)
				}
			},
		},
		{
			name: "time never goes backwards; equal times are fine",
			p:    payWire,
			steps: []step{
				{req: reqID("w", "wire", nil), secs: 5, decision: lineage.Pending},
				{req: req("pay", nil), secs: 4.999999999, err: lineage.ErrTimeBackwards},
				{req: reqID("w", "wire", nil), secs: 4, decision: lineage.Pending}, // a retry: before the time check
				{approve: "w", secs: 4, err: lineage.ErrTimeBackwards},
				{reject: "w", secs: 4, err: lineage.ErrTimeBackwards},
				{terminate: "ops", secs: 4, err: lineage.ErrTimeBackwards},
				{req: req("pay", nil), secs: 5, decision: lineage.Allow},
				{approve: "w", secs: 5, decision: lineage.Allow},
				{terminate: "ops", secs: 5, status: lineage.Terminated},
			},
		},
		{
			name: "a termination caused by a verdict is at the verdict's time",
			p:    policy.Policy{Budget: 1, Tools: map[string]policy.ToolRule{"pay": {Cost: 1}}},
			steps: []step{
				{req: req("pay", nil), secs: 3, decision: lineage.Allow, terminated: lineage.BudgetExhausted},
				{terminate: "ops", secs: 3, err: lineage.ErrSealed},          // at 3 is not backwards...
				{terminate: "ops", secs: 2.5, err: lineage.ErrTimeBackwards}, // ...2.5 is
			},
		},
		{
			name: "malformed requests are errors",
			p:    policy.Policy{Budget: 10, DefaultRule: &policy.ToolRule{Cost: 0}},
			steps: []step{
				{req: req("", nil), secs: 1, err: lineage.ErrBadRequest},
				{req: req("-x", nil), secs: 1, err: lineage.ErrBadRequest},
				{req: req("a b", nil), secs: 1, err: lineage.ErrBadRequest},
				{req: req("x\n", nil), secs: 1, err: lineage.ErrBadRequest},
				{req: req(strings.Repeat("a", 129), nil), secs: 1, err: lineage.ErrBadRequest},
				{req: req("t", map[string]any{"n": json.Number("1e400")}), secs: 1, err: lineage.ErrBadRequest},
				{req: req("t", map[string]any{"n": json.Number("abc")}), secs: 1, err: lineage.ErrBadRequest},
				{req: req("t", nest(33)), secs: 1, err: lineage.ErrBadRequest},
				{req: req("t", nest(32)), secs: 1, decision: lineage.Allow, seq: 2},
				{req: req(strings.Repeat("a", 128), nil), secs: 1, decision: lineage.Allow},
				{req: req("A0_.:/-z", nil), secs: 1, decision: lineage.Allow, seq: 4},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newModel(t, c.p)
			run(t, m, c.steps)
			if c.state != nil {
				c.state(t, m.State())
			}
		})
	}
}

// nest returns args nested n levels deep, args itself being level 1.
func nest(n int) map[string]any {
	var v any = json.Number("1")
	for i := 1; i < n; i++ {
		if i%2 == 0 {
			v = []any{v}
		} else {
			v = map[string]any{"k": v}
		}
	}
	return map[string]any{"k": v}
}

func TestNestDepth(t *testing.T) {
	if d := depth(nest(32)); d != 32 {
		t.Fatalf("depth(nest(32)) = %d", d)
	}
	if d := depth(map[string]any{}); d != 1 {
		t.Fatalf("depth({}) = %d", d)
	}
}

func TestRequestWithoutTimeIsAnError(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 1, DefaultRule: &policy.ToolRule{}})
	if _, err := m.Request(lineage.Request{Tool: "t"}); !errors.Is(err, lineage.ErrBadRequest) {
		t.Fatalf("err = %v", err)
	}
}

func TestStateShapeAndDeepCopy(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 5, Tools: map[string]policy.ToolRule{
		"wire": {Cost: 1, RequiresApproval: true},
	}})
	s := m.State()
	if s.Agent != "agt_test" || s.Seq != 1 || s.Head != "" || s.Status != lineage.Alive || s.Termination != "" ||
		s.Budget != 5 || s.Remaining != 5 || s.Spent != 0 || s.ScarScore != 0 {
		t.Fatalf("initial state = %+v", s)
	}
	if s.Scars == nil || len(s.Scars) != 3 || s.Calls == nil || s.Pending == nil || s.Window == nil || len(s.Window) != 0 {
		t.Fatalf("initial collections = %+v", s)
	}
	js, _ := json.Marshal(s)
	if !strings.Contains(string(js), `"window":[]`) || !strings.Contains(string(js), `"scars":{"minor":0,"moderate":0,"severe":0}`) {
		t.Fatalf("json = %s", js)
	}

	args := map[string]any{"to": "bob", "list": []any{json.Number("1")}}
	if _, err := m.Request(lineage.Request{ID: "w", Tool: "wire", Args: args, At: at(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Request(lineage.Request{ID: "x", Tool: "wire", At: at(1)}); err != nil {
		t.Fatal(err)
	}
	// The caller's args are not aliased.
	args["to"] = "eve"
	s = m.State()
	want := lineage.RecordedRequest{ID: "w", Tool: "wire", Args: map[string]any{"to": "bob", "list": []any{json.Number("1")}}}
	if !jsonEqual(s.Pending["w"].Args, want.Args) || s.Pending["w"].ID != "w" || s.Pending["w"].Tool != "wire" {
		t.Fatalf("pending[w] = %+v", s.Pending["w"])
	}
	if a := s.Pending["x"].Args; a == nil || len(a) != 0 {
		t.Fatalf("pending[x].args = %#v, want {}", a)
	}
	// Mutating a returned state does not touch the model.
	s.Pending["w"].Args["to"] = "mallory"
	s.Pending["w"].Args["list"].([]any)[0] = json.Number("9")
	s.Scars[lineage.Minor] = 99
	s.Calls["zzz"] = 1
	delete(s.Pending, "x")
	s2 := m.State()
	if s2.Pending["w"].Args["to"] != "bob" || s2.Pending["w"].Args["list"].([]any)[0] != json.Number("1") ||
		s2.Scars[lineage.Minor] != 0 || len(s2.Calls) != 0 || len(s2.Pending) != 2 {
		t.Fatalf("state was aliased: %+v", s2)
	}
	// Mutating a returned verdict's scar does not touch a recorded verdict.
	m2 := newModel(t, policy.Policy{Budget: 5})
	v, _ := m2.Request(lineage.Request{ID: "u", Tool: "u", At: at(1)})
	v.Scar.Weight = 1000
	v2, _ := m2.Request(lineage.Request{ID: "u", Tool: "u", At: at(1)})
	if v2.Scar == nil || v2.Scar.Weight != 3 {
		t.Fatalf("retry verdict = %+v", v2)
	}
}

func TestWindowKeepsLastMaxActions(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 100, RateLimit: &policy.RateLimit{MaxActions: 3, WindowSecs: 1},
		Tools: map[string]policy.ToolRule{"t": {Cost: 0}}})
	for i := 0; i < 10; i++ {
		v, err := m.Request(lineage.Request{Tool: "t", At: at(float64(i))})
		if err != nil || v.Decision != lineage.Allow {
			t.Fatalf("request %d: %+v %v", i, v, err)
		}
	}
	w := m.State().Window
	if len(w) != 3 || !w[0].Equal(at(7)) || !w[2].Equal(at(9)) {
		t.Fatalf("window = %v", w)
	}
}

func TestHugeWindowCountsEverything(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 100, RateLimit: &policy.RateLimit{MaxActions: 1, WindowSecs: 1 << 62},
		Tools: map[string]policy.ToolRule{"t": {Cost: 0}}})
	if v, _ := m.Request(lineage.Request{Tool: "t", At: at(0)}); v.Decision != lineage.Allow {
		t.Fatalf("first = %+v", v)
	}
	if v, _ := m.Request(lineage.Request{Tool: "t", At: genesis.AddDate(200, 0, 0)}); v.Reason != "rate_limited" {
		t.Fatalf("200 years later = %+v", v)
	}
}

func TestIDLessRequestsGetReqSeq(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{"wire": {Cost: 1, RequiresApproval: true}}})
	v, err := m.Request(lineage.Request{Tool: "wire", At: at(1)})
	if err != nil || v.RequestID != "req_2" || v.Seq != 2 {
		t.Fatalf("verdict = %+v, %v", v, err)
	}
	if _, ok := m.State().Pending["req_2"]; !ok {
		t.Fatalf("pending = %v", m.State().Pending)
	}
	v, err = m.Approve("req_2", "alice", at(2))
	if err != nil || v.Decision != lineage.Allow || v.RequestID != "req_2" || v.Seq != 3 {
		t.Fatalf("approve = %+v, %v", v, err)
	}
	// The assigned id is an id like any other: a retry with it gets the current verdict.
	v, err = m.Request(lineage.Request{ID: "req_2", Tool: "wire", At: at(3)})
	if err != nil || v.Decision != lineage.Allow || v.Seq != 3 {
		t.Fatalf("retry = %+v, %v", v, err)
	}
}

func TestNewRefuses(t *testing.T) {
	bad := []struct {
		name string
		p    policy.Policy
		want string
	}{
		{"rego", policy.Policy{Budget: 1, Rego: []policy.RegoModule{{Source: "package lineage.ext.x"}}}, "Rego"},
		{"syntax", policy.Policy{Budget: 1, Tools: map[string]policy.ToolRule{"t": {When: []policy.Constraint{{Expr: "args.a <", Reason: "r"}}}}}, "/tools/t/when/0/expr"},
		{"type", policy.Policy{Budget: 1, Tools: map[string]policy.ToolRule{"t": {When: []policy.Constraint{{Expr: "tool", Reason: "r"}}}}}, "/tools/t/when/0/expr"},
		{"undeclared", policy.Policy{Budget: 1, DefaultRule: &policy.ToolRule{When: []policy.Constraint{{Expr: "true", Reason: "r"}, {Expr: "x == 1", Reason: "r"}}}}, "/default_rule/when/1/expr"},
		{"scar", policy.Policy{Budget: 1, Tools: map[string]policy.ToolRule{"t": {When: []policy.Constraint{{Expr: "true", Reason: "r", Scar: "huge"}}}}}, "/tools/t/when/0/scar"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := New("agt", normalize(b.p), genesis)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Fatalf("err = %v, want mention of %q", err, b.want)
			}
		})
	}
	if _, err := New("agt", policy.Policy{Budget: 1, Tools: map[string]policy.ToolRule{}}, genesis); err == nil {
		t.Fatal("an unnormalized policy was accepted")
	}
}
