// Package model is the reference model of lineage's behaviour contract: one agent
// simulated from the reference in docs/ (the decision order, CEL constraints, approvals, the folded state) and docs/decisions.md alone, in plain
// Go. It is deliberately independent of the real engine (no OPA, no Rego, no log,
// no hashes), so that differential tests can hold the two against each other.
//
// The model decides exactly what a full replay of the agent's log would fold to,
// but keeps only what the decisions need: counters, the last max_actions allowed
// times, and one entry per request id. Every step costs O(1) in the log's length
// (O(log max_actions) for the window, O(size of args + constraints) for CEL).
//
// Choices where the spec and the decisions are silent are written next to the
// code that makes them, marked "Choice:".
package model

import (
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// Reasons a verdict gives (docs/decision-order.md, docs/approvals.md).
const (
	reasonOK                = "ok"
	reasonApprovalRequired  = "approval_required"
	reasonTerminated        = "terminated"
	reasonUnlistedTool      = "unlisted_tool"
	reasonRateLimited       = "rate_limited"
	reasonMaxCallsExceeded  = "max_calls_exceeded"
	reasonInsufficientFunds = "insufficient_budget"
	reasonApprovalRejected  = "approval_rejected"
	reasonTooManyPending    = "too_many_pending"
	reasonInvalidArgs       = "invalid_args"
)

// toolName is the pattern of docs/policy.md for tool names.
var (
	toolName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)
	assignedID = regexp.MustCompile(`^req_[0-9]+$`)
)

// rule is a compiled tool rule.
type rule struct {
	cost             int64
	maxCalls         int64 // 0: no cap
	requiresApproval bool
	schema           *jsonschema.Schema // nil: any args
	when             []*constraint
}

// entry is what the model remembers of one recorded request: the request as
// recorded and the verdict that is current for it (D2: retries).
type entry struct {
	req     lineage.RecordedRequest // Args normalized (see normalizeArgs)
	verdict lineage.Verdict
}

// Model is one agent simulated from the reference in docs/ alone, in plain Go: no OPA, no log,
// no hashes. It does not run Rego extensions: New refuses a policy that has any.
//
// A Model is safe for concurrent use (calls are serialized), though the contract
// it models is that of one agent's serialized log.
type Model struct {
	mu sync.Mutex

	// The policy, compiled.
	agent       string
	name        string // the agent's genesis name (SetName)
	budget      int64
	scarLimit   int64
	weights     map[lineage.Severity]int64
	maxPending  int64         // 0: no limit (a policy recorded before max_pending)
	maxActions  int64         // 0: no rate limit
	window      time.Duration // only with a rate limit
	windowInf   bool          // window_secs too large for a time.Duration: every allowed action counts
	tools       map[string]*rule
	defaultRule *rule // nil: unlisted tools are denied

	// The folded state.
	seq         uint64    // seq of the last record
	last        time.Time // at of the last record
	termination lineage.Termination
	spent       int64
	scarScore   int64
	scars       map[lineage.Severity]int64
	calls       map[string]int64
	times       []time.Time       // at of the last maxActions allowed actions, oldest first
	ids         map[string]*entry // every recorded request by id
	pending     map[string]*entry // the pending ones
}

// New starts an agent at genesis time at with a NORMALIZED policy: ScarLimit and
// ScarWeights non-nil, every constraint's Scar one of none, minor, moderate,
// severe. Records 0 (genesis) and 1 (policy) are implied, both at time at: the
// next record's seq is 2.
//
// New returns an error if the policy is not normalized, has a value out of the
// range docs/policy.md allows, has Rego extensions (the model does not run Rego), or has
// a CEL expression that does not compile or whose type is neither bool nor dyn.
func New(agent string, p policy.Policy, at time.Time) (*Model, error) {
	if len(p.Rego) > 0 {
		return nil, fmt.Errorf("model: policy has %d Rego extension(s): the reference model does not run Rego", len(p.Rego))
	}
	if p.ScarLimit == nil || p.ScarWeights == nil {
		return nil, fmt.Errorf("model: policy is not normalized (scar_limit and scar_weights must be filled)")
	}
	if p.Budget < 0 {
		return nil, fmt.Errorf("model: /budget: %d < 0", p.Budget)
	}
	if *p.ScarLimit < 1 {
		return nil, fmt.Errorf("model: /scar_limit: %d < 1", *p.ScarLimit)
	}
	w := *p.ScarWeights
	if w.Minor < 1 || w.Moderate < 1 || w.Severe < 1 {
		return nil, fmt.Errorf("model: /scar_weights: every weight must be >= 1")
	}
	m := &Model{
		agent:     agent,
		budget:    p.Budget,
		scarLimit: *p.ScarLimit,
		weights: map[lineage.Severity]int64{
			lineage.Minor: w.Minor, lineage.Moderate: w.Moderate, lineage.Severe: w.Severe,
		},
		tools:   map[string]*rule{},
		seq:     1,
		last:    at.Round(0),
		scars:   map[lineage.Severity]int64{lineage.Minor: 0, lineage.Moderate: 0, lineage.Severe: 0},
		calls:   map[string]int64{},
		ids:     map[string]*entry{},
		pending: map[string]*entry{},
	}
	if p.MaxPending != nil {
		if *p.MaxPending < 1 {
			return nil, fmt.Errorf("model: /max_pending: %d < 1", *p.MaxPending)
		}
		m.maxPending = *p.MaxPending
	}
	if rl := p.RateLimit; rl != nil {
		if rl.MaxActions < 1 || rl.WindowSecs < 1 {
			return nil, fmt.Errorf("model: /rate_limit: max_actions and window_secs must be >= 1")
		}
		m.maxActions = rl.MaxActions
		// Choice: a window too long for int64 nanoseconds (over ~292 years) is
		// treated as infinite: every allowed action counts against the limit.
		if rl.WindowSecs > int64(maxDuration/time.Second) {
			m.windowInf = true
		} else {
			m.window = time.Duration(rl.WindowSecs) * time.Second
		}
	}
	env, err := newCELEnv()
	if err != nil {
		return nil, fmt.Errorf("model: CEL environment: %w", err)
	}
	names := make([]string, 0, len(p.Tools))
	for name := range p.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r, err := compileRule(env, "/tools/"+name, p.Tools[name])
		if err != nil {
			return nil, err
		}
		m.tools[name] = r
	}
	if p.DefaultRule != nil {
		r, err := compileRule(env, "/default_rule", *p.DefaultRule)
		if err != nil {
			return nil, err
		}
		m.defaultRule = r
	}
	return m, nil
}

const maxDuration = time.Duration(1<<63 - 1)

func compileRule(env *celEnv, ptr string, tr policy.ToolRule) (*rule, error) {
	if tr.Cost < 0 {
		return nil, fmt.Errorf("model: %s/cost: %d < 0", ptr, tr.Cost)
	}
	r := &rule{cost: tr.Cost, requiresApproval: tr.RequiresApproval}
	if tr.MaxCalls != nil {
		if *tr.MaxCalls < 1 {
			return nil, fmt.Errorf("model: %s/max_calls: %d < 1", ptr, *tr.MaxCalls)
		}
		r.maxCalls = *tr.MaxCalls
	}
	if tr.ArgsSchema != nil {
		sch, err := compileArgsSchema(ptr+"/args_schema", tr.ArgsSchema)
		if err != nil {
			return nil, err
		}
		r.schema = sch
	}
	for i, c := range tr.When {
		cc, err := env.compile(fmt.Sprintf("%s/when/%d", ptr, i), c)
		if err != nil {
			return nil, err
		}
		r.when = append(r.when, cc)
	}
	return r, nil
}

// Request decides one request (docs/decision-order.md). req.At must be set.
//
// Errors (nothing is recorded, nothing changes), checked in this order:
// ErrBadRequest (zero At or one outside 1970…2262-04-11 (D50: the times the guard holds), empty tool, tool
// name not matching the pattern, args that are not JSON, with a number outside
// float64's range, or nested deeper than 32 levels), ErrIDConflict (a retry is
// answered before the time check), ErrTimeBackwards (At before the last
// record's time).
func (m *Model) Request(req lineage.Request) (lineage.Verdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if req.At.IsZero() {
		return lineage.Verdict{}, fmt.Errorf("model: request without a time: %w", lineage.ErrBadRequest)
	}
	if req.Tool == "" {
		return lineage.Verdict{}, fmt.Errorf("model: request without a tool: %w", lineage.ErrBadRequest)
	}
	if !toolName.MatchString(req.Tool) {
		return lineage.Verdict{}, fmt.Errorf("model: tool name %q does not match %s: %w", req.Tool, toolName, lineage.ErrBadRequest)
	}
	args, err := normalizeArgs(req.Args)
	if err != nil {
		return lineage.Verdict{}, fmt.Errorf("model: args: %v: %w", err, lineage.ErrBadRequest)
	}
	t := req.At.Round(0) // wall time only: times compare as the log records them
	if err := holdable(t); err != nil {
		return lineage.Verdict{}, err
	}

	// Step 1: a retry returns the current verdict of the earlier request (D2: retries, D3 (id conflicts)),
	// before any time check: an exact retry is answered whatever its at.
	// Choice: only a caller-given id is looked up; a request without an id is a
	// new request (see below for the id it gets).
	if req.ID != "" {
		if e, ok := m.ids[req.ID]; ok {
			if e.req.Tool != req.Tool || !jsonEqual(e.req.Args, args) {
				return lineage.Verdict{}, fmt.Errorf("model: request id %q was used with another tool or other args: %w", req.ID, lineage.ErrIDConflict)
			}
			if e.verdict.Decision == lineage.Pending && m.termination != "" {
				// Pending when the agent was terminated: void (docs/decision-order.md step 1, D51 (retries come before time checks; void pending answers terminated)).
				return lineage.Verdict{Decision: lineage.Deny, Reason: reasonTerminated, RequestID: req.ID}, nil
			}
			return copyVerdict(e.verdict), nil
		}
		if assignedID.MatchString(req.ID) {
			return lineage.Verdict{}, fmt.Errorf("model: id %q is of the form req_<n>, reserved for assigned ids (D17): %w", req.ID, lineage.ErrBadRequest)
		}
	}
	if t.Before(m.last) {
		return lineage.Verdict{}, fmt.Errorf("model: request at %s is before the last record (%s): %w",
			t.UTC().Format(time.RFC3339Nano), m.last.UTC().Format(time.RFC3339Nano), lineage.ErrTimeBackwards)
	}

	// Step 2: a terminated agent refuses everything; nothing is appended (D4: refusals that are not recorded).
	// Choice: Terminated is "" here: the field says what this verdict caused.
	if m.termination != "" {
		return lineage.Verdict{Decision: lineage.Deny, Reason: reasonTerminated, RequestID: req.ID}, nil
	}

	seq := m.seq + 1
	id := req.ID
	if id == "" {
		// Callers cannot send ids of this form (D17: assigned ids), so it is unique.
		id = fmt.Sprintf("req_%d", seq)
	}
	v := lineage.Verdict{RequestID: id, Seq: seq}

	// Steps 3-9.
	r, reason, sev, ok := m.check(req.Tool, args, t)
	switch {
	case !ok:
		v.Decision, v.Reason = lineage.Deny, reason
		if sev != "" {
			v.Scar = &lineage.Scar{Severity: sev, Weight: m.weights[sev]}
		}
	case r.requiresApproval && m.maxPending > 0 && int64(len(m.pending)) >= m.maxPending:
		// Step 8: the agent already has max_pending pending requests.
		v.Decision, v.Reason = lineage.Deny, reasonTooManyPending
		v.Scar = &lineage.Scar{Severity: lineage.Minor, Weight: m.weights[lineage.Minor]}
	case r.requiresApproval:
		v.Decision, v.Reason = lineage.Pending, reasonApprovalRequired
	default:
		v.Decision, v.Reason = lineage.Allow, reasonOK
		m.charge(req.Tool, r.cost, t)
		v.Cost = r.cost
	}
	m.seq, m.last = seq, t // the action record

	e := &entry{req: lineage.RecordedRequest{ID: id, Tool: req.Tool, Args: args}}
	m.ids[id] = e
	if v.Decision == lineage.Pending {
		m.pending[id] = e
	}

	// After the action record: terminations (docs/decision-order.md, D6 (termination time)).
	if v.Scar != nil {
		m.scarScore += v.Scar.Weight
		m.scars[v.Scar.Severity]++
		if m.scarScore >= m.scarLimit {
			v.Terminated = lineage.ScarLimitReached
		}
	}
	if v.Decision == lineage.Allow && v.Cost > 0 && m.remaining() == 0 {
		v.Terminated = lineage.BudgetExhausted
	}
	if v.Terminated != "" {
		m.terminate(v.Terminated, t)
	}
	e.verdict = v
	return copyVerdict(v), nil
}

// Approve approves a pending request (docs/approvals.md, D8 (approvals are windowed at approval time), D10 (approval re-check)): steps 3-7 of docs/decision-order.md run
// again at time at against the current state; if one fails the verdict is a deny
// with that check's reason and no scar, otherwise an allow (charged, counted,
// windowed at at), which may terminate the agent with budget_exhausted. One
// approval record is appended either way.
//
// Errors, checked in this order: ErrBadApprover (see goodName),
// ErrBadRequest (zero time), ErrTimeBackwards, ErrSealed (terminated agent),
// ErrNotPending (unknown or already decided id).
func (m *Model) Approve(requestID, approver string, at time.Time) (lineage.Verdict, error) {
	return m.decide(requestID, approver, at, true)
}

// Reject rejects a pending request (docs/approvals.md): deny approval_rejected, no scar,
// cost 0; one approval record is appended. Errors as for Approve.
func (m *Model) Reject(requestID, approver string, at time.Time) (lineage.Verdict, error) {
	return m.decide(requestID, approver, at, false)
}

func (m *Model) decide(id, approver string, at time.Time, approve bool) (lineage.Verdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if !m.goodName(approver) {
		return lineage.Verdict{}, fmt.Errorf("model: approver %q: must name a person or service other than the agent: %w", approver, lineage.ErrBadApprover)
	}
	if at.IsZero() {
		return lineage.Verdict{}, fmt.Errorf("model: approval without a time: %w", lineage.ErrBadRequest)
	}
	at = at.Round(0)
	if err := holdable(at); err != nil {
		return lineage.Verdict{}, err
	}
	if at.Before(m.last) {
		return lineage.Verdict{}, fmt.Errorf("model: approval at %s is before the last record (%s): %w",
			at.UTC().Format(time.RFC3339Nano), m.last.UTC().Format(time.RFC3339Nano), lineage.ErrTimeBackwards)
	}
	if m.termination != "" {
		return lineage.Verdict{}, fmt.Errorf("model: agent is terminated (%s): %w", m.termination, lineage.ErrSealed)
	}
	e, ok := m.pending[id]
	if !ok {
		return lineage.Verdict{}, fmt.Errorf("model: request %q is not pending: %w", id, lineage.ErrNotPending)
	}

	seq := m.seq + 1
	v := lineage.Verdict{Decision: lineage.Deny, RequestID: id, Seq: seq}
	if !approve {
		v.Reason = reasonApprovalRejected
	} else if r, reason, _, ok := m.check(e.req.Tool, e.req.Args, at); !ok {
		v.Reason = reason // no scar: the agent did nothing wrong at that moment
	} else {
		v.Decision, v.Reason = lineage.Allow, reasonOK
		m.charge(e.req.Tool, r.cost, at)
		v.Cost = r.cost
	}
	m.seq, m.last = seq, at // the approval record
	delete(m.pending, id)

	if v.Decision == lineage.Allow && v.Cost > 0 && m.remaining() == 0 {
		v.Terminated = lineage.BudgetExhausted
		m.terminate(v.Terminated, at)
	}
	e.verdict = v
	return copyVerdict(v), nil
}

// Terminate is the kill switch (docs/approvals.md, D13 ('terminate' on a terminated agent is an error ('sealed'))): it appends a termination record
// with reason killed at time at and voids every pending request (D11: pending is void at termination).
//
// Errors, checked in this order: ErrBadRequest (by not a goodName, zero time),
// ErrTimeBackwards, ErrSealed (already terminated).
func (m *Model) Terminate(by string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	if !m.goodName(by) {
		return fmt.Errorf("model: terminate by %q: must name a person or service other than the agent: %w", by, lineage.ErrBadRequest)
	}
	if at.IsZero() {
		return fmt.Errorf("model: terminate without a time: %w", lineage.ErrBadRequest)
	}
	at = at.Round(0)
	if err := holdable(at); err != nil {
		return err
	}
	if at.Before(m.last) {
		return fmt.Errorf("model: terminate at %s is before the last record (%s): %w",
			at.UTC().Format(time.RFC3339Nano), m.last.UTC().Format(time.RFC3339Nano), lineage.ErrTimeBackwards)
	}
	if m.termination != "" {
		return fmt.Errorf("model: agent is already terminated (%s): %w", m.termination, lineage.ErrSealed)
	}
	m.terminate(lineage.Killed, at)
	return nil
}

// State returns the folded state (docs/decision-order.md#folded-state, D14 ('scars' always has the three keys 'minor', 'moderate', 'severe')) as a deep copy. Head is "": the
// model has no hashes. Seq is the seq of the last record.
func (m *Model) State() lineage.State {
	m.mu.Lock()
	defer m.mu.Unlock()

	s := lineage.State{
		Agent:       m.agent,
		Seq:         m.seq,
		Head:        "",
		Status:      lineage.Alive,
		Termination: m.termination,
		Budget:      m.budget,
		Spent:       m.spent,
		Remaining:   m.remaining(),
		ScarScore:   m.scarScore,
		Scars:       make(map[lineage.Severity]int64, 3),
		Calls:       make(map[string]int64, len(m.calls)),
		Window:      make([]lineage.Time, 0, len(m.times)),
		Pending:     make(map[string]lineage.RecordedRequest, len(m.pending)),
	}
	if m.termination != "" {
		s.Status = lineage.Terminated
	}
	for _, sev := range lineage.Severities {
		s.Scars[sev] = m.scars[sev]
	}
	for tool, n := range m.calls {
		s.Calls[tool] = n
	}
	for _, t := range m.times {
		s.Window = append(s.Window, lineage.Time{Time: t.UTC()})
	}
	for id, e := range m.pending {
		s.Pending[id] = lineage.RecordedRequest{ID: e.req.ID, Tool: e.req.Tool, Args: copyJSON(e.req.Args).(map[string]any)}
	}
	return s
}

// check runs steps 3-7 of docs/decision-order.md for tool and args at time t against the current
// state. ok reports that every check passed; otherwise reason is the denying
// rule's and sev the severity of its scar ("" for no scar). r is the matched rule
// (nil only for unlisted_tool).
func (m *Model) check(tool string, args map[string]any, t time.Time) (r *rule, reason string, sev lineage.Severity, ok bool) {
	// 3. The rule.
	r = m.tools[tool]
	if r == nil {
		r = m.defaultRule
	}
	if r == nil {
		return nil, reasonUnlistedTool, lineage.Moderate, false
	}
	// 4. Rate limit: allowed actions with at in (t - window, t].
	if m.maxActions > 0 && m.inWindow(t) >= m.maxActions {
		return r, reasonRateLimited, lineage.Minor, false
	}
	// 5. max_calls, per tool name (default-rule tools too).
	if r.maxCalls > 0 && m.calls[tool] >= r.maxCalls {
		return r, reasonMaxCallsExceeded, lineage.Minor, false
	}
	// 6. Constraints: the args schema first (docs/policy.md#argument-schemas),
	// then the when list in order; the first that does not hold denies.
	if r.schema != nil && r.schema.Validate(args) != nil {
		return r, reasonInvalidArgs, lineage.Minor, false
	}
	if len(r.when) > 0 {
		vars := m.celVars(tool, args, t)
		for _, c := range r.when {
			if !c.holds(vars) {
				return r, c.reason, c.severity, false
			}
		}
	}
	// 7. Budget.
	if r.cost > m.remaining() {
		return r, reasonInsufficientFunds, "", false
	}
	return r, "", "", true
}

// inWindow counts the allowed actions with at in (t - window, t]. D7 (time never goes backwards): an action
// at a counts iff t - window < a, in integer nanoseconds. Times never go
// backwards, so every kept time is <= t and only the lower bound matters; the
// model keeps the last maxActions allowed times, which is all the comparison
// with maxActions ever needs.
func (m *Model) inWindow(t time.Time) int64 {
	if m.windowInf {
		return int64(len(m.times))
	}
	cutoff := t.Add(-m.window)
	first := sort.Search(len(m.times), func(i int) bool { return m.times[i].After(cutoff) })
	return int64(len(m.times) - first)
}

// charge makes an allowed action count: cost spent, one call of tool, t in the
// window (step 9; for approvals D8 (approvals are windowed at approval time): at the approval's time).
func (m *Model) charge(tool string, cost int64, t time.Time) {
	m.spent += cost
	m.calls[tool]++
	if m.maxActions > 0 {
		m.times = append(m.times, t)
		if int64(len(m.times)) > m.maxActions {
			m.times = m.times[1:]
		}
	}
}

func (m *Model) remaining() int64 { return m.budget - m.spent }

// terminate appends a termination record at time at and seals the agent; its
// pending requests are void (D11: pending is void at termination). Their entries keep their pending verdict, which
// is what a retry returns (D2: retries).
func (m *Model) terminate(reason lineage.Termination, at time.Time) {
	m.seq++
	m.last = at
	m.termination = reason
	m.pending = map[string]*entry{}
}

func copyVerdict(v lineage.Verdict) lineage.Verdict {
	if v.Scar != nil {
		s := *v.Scar
		v.Scar = &s
	}
	return v
}
