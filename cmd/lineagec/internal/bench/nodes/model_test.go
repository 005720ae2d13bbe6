package nodes

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lineage-guard/lineage"
)

// This file is a small sequential model of docs/decision-order.md for one agent with one
// tool, enough for the races of TestNodesExact: retries of one request id
// (step 1), a sealed log (step 2), max_calls, the budget, requires_approval,
// the termination an exhausted budget causes, and approvals (docs/approvals.md). Its
// histories are checked for linearizability with porcupine.

// rules are the policy of the agent the model stands for.
type rules struct {
	budget, cost int64
	maxCalls     int64 // 0: no cap
	approval     bool  // requires_approval
	retryID      string
}

// mState is the agent's state: comparable, so porcupine's cache works.
type mState struct {
	seq        uint64 // the last record's seq
	spent      int64
	calls      int64
	terminated bool
	pending    bool // the one request that awaits approval (D11 (pending is void at termination) voids it at termination)
	retried    bool // retryID has been decided
	retryV     mOut
}

// mIn is a request (approve false) or an approval of request id.
type mIn struct {
	approve bool
	id      string
}

// mOut is what a client saw: a verdict, or an error code.
type mOut struct {
	decision lineage.Decision
	reason   string
	seq      uint64
	err      string
}

func outOf(v lineage.Verdict, err error) mOut {
	if err != nil {
		switch {
		case errors.Is(err, lineage.ErrNotPending):
			return mOut{err: "not_pending"}
		case errors.Is(err, lineage.ErrSealed):
			return mOut{err: "sealed"}
		}
		return mOut{err: err.Error()}
	}
	return mOut{decision: v.Decision, reason: v.Reason, seq: v.Seq}
}

func (r rules) model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return mState{seq: 1} }, // genesis and policy
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(mState), input.(mIn), output.(mOut)
			want, next := r.step(s, in)
			return want == out, next
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%+v -> %+v", input, output)
		},
	}
}

// step is the sequential rule: the answer to in on state s, and the state after.
func (r rules) step(s mState, in mIn) (mOut, mState) {
	allow := func(s mState) (mOut, mState) {
		s.seq++
		s.spent += r.cost
		s.calls++
		out := mOut{decision: lineage.Allow, reason: "ok", seq: s.seq}
		if s.spent >= r.budget { // the termination record follows the action
			s.seq++
			s.terminated, s.pending = true, false
		}
		return out, s
	}
	if in.approve {
		switch {
		case s.terminated:
			return mOut{err: "sealed"}, s
		case !s.pending:
			return mOut{err: "not_pending"}, s
		}
		s.pending = false
		if s.spent+r.cost > r.budget {
			s.seq++
			return mOut{decision: lineage.Deny, reason: "insufficient_budget", seq: s.seq}, s
		}
		return allow(s)
	}
	if in.id == r.retryID && s.retried {
		return s.retryV, s
	}
	var out mOut
	switch {
	case s.terminated:
		return mOut{decision: lineage.Deny, reason: "terminated"}, s
	case r.maxCalls > 0 && s.calls >= r.maxCalls:
		s.seq++
		out = mOut{decision: lineage.Deny, reason: "max_calls_exceeded", seq: s.seq}
	case s.spent+r.cost > r.budget:
		s.seq++
		out = mOut{decision: lineage.Deny, reason: "insufficient_budget", seq: s.seq}
	case r.approval:
		s.seq++
		s.pending = true
		out = mOut{decision: lineage.Pending, reason: "approval_required", seq: s.seq}
	default:
		out, s = allow(s)
	}
	if in.id == r.retryID {
		s.retried, s.retryV = true, out
	}
	return out, s
}

// history collects operations with times from one monotonic clock.
type history struct {
	base time.Time
	ops  []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.base)) }

// check says whether h is linearizable under r, within a bound of time.
func (h *history) check(r rules) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(r.model(), h.ops, 20*time.Second)
}

func (h *history) add(client int, in mIn, call int64, out mOut) {
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: h.now()})
}

// TestModelRejects: the model and the checker find what the races must
// never show: a credit spent twice, a seq taken twice, two approvals.
func TestModelRejects(t *testing.T) {
	allow := func(seq uint64) mOut { return mOut{decision: lineage.Allow, reason: "ok", seq: seq} }
	credits := rules{budget: 2, cost: 1}
	cases := []struct {
		name string
		r    rules
		ops  []porcupine.Operation
	}{
		{"one seq twice", credits, []porcupine.Operation{
			{ClientId: 0, Input: mIn{id: "a"}, Call: 0, Output: allow(2), Return: 10},
			{ClientId: 1, Input: mIn{id: "b"}, Call: 0, Output: allow(2), Return: 10},
		}},
		{"a credit beyond the budget", credits, []porcupine.Operation{
			{ClientId: 0, Input: mIn{id: "a"}, Call: 0, Output: allow(2), Return: 10},
			{ClientId: 1, Input: mIn{id: "b"}, Call: 0, Output: allow(3), Return: 10},
			{ClientId: 2, Input: mIn{id: "c"}, Call: 0, Output: allow(5), Return: 10},
		}},
		{"a stale read of the order", credits, []porcupine.Operation{
			{ClientId: 0, Input: mIn{id: "a"}, Call: 0, Output: allow(3), Return: 1},
			{ClientId: 1, Input: mIn{id: "b"}, Call: 2, Output: allow(2), Return: 3},
		}},
		{"two approvals", rules{budget: 10, cost: 1, approval: true}, []porcupine.Operation{
			{ClientId: 0, Input: mIn{id: "p"}, Call: 0, Output: mOut{decision: lineage.Pending, reason: "approval_required", seq: 2}, Return: 1},
			{ClientId: 1, Input: mIn{approve: true, id: "p"}, Call: 2, Output: allow(3), Return: 10},
			{ClientId: 2, Input: mIn{approve: true, id: "p"}, Call: 2, Output: allow(4), Return: 10},
		}},
	}
	for _, c := range cases {
		h := &history{ops: c.ops}
		if res := h.check(c.r); res != porcupine.Illegal {
			t.Errorf("%s: %s, want Illegal", c.name, res)
		}
	}
	ok := &history{ops: []porcupine.Operation{
		{ClientId: 0, Input: mIn{id: "a"}, Call: 0, Output: allow(3), Return: 10},
		{ClientId: 1, Input: mIn{id: "b"}, Call: 0, Output: allow(2), Return: 10},
	}}
	if res := ok.check(credits); res != porcupine.Ok {
		t.Errorf("two concurrent allows in either order: %s, want Ok", res)
	}
}
