package lineage.guard_test

import data.lineage.guard

# A small policy, given to the library the way the generated module would.
pay := {"cost": 2, "requires_approval": false, "max_calls": 3, "when": []}

wire := {"cost": 5, "requires_approval": true, "when": []}

weights := {"minor": 1, "moderate": 3, "severe": 10}

state(remaining, score) := {"budget": 10, "spent": 10 - remaining, "remaining": remaining, "scar_score": score, "calls": {"pay": 1}, "tool_calls": 1}

req(tool) := {"id": "r1", "tool": tool, "args": {}, "at": "2026-01-01T00:00:10Z", "at_ns": 10000000000}

inp(tool, remaining, score) := {"mode": "request", "request": req(tool), "state": state(remaining, score)}

test_allow_charges_cost if {
	v := guard.verdict with input as inp("pay", 10, 0) with data.lineage.policy.rule as pay
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v == {"decision": "allow", "reason": "ok", "cost": 2, "scar": "none", "weight": 0, "terminated": null}
}

test_unlisted_tool_scars_moderate if {
	v := guard.verdict with input as inp("run_shell", 10, 0)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.decision == "deny"
	v.reason == "unlisted_tool"
	v.scar == "moderate"
	v.weight == 3
	v.terminated == null
}

test_scar_limit_reached_exactly if {
	v := guard.verdict with input as inp("run_shell", 10, 7)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.terminated == "scar_limit_reached"
}

test_scar_limit_one_short if {
	v := guard.verdict with input as inp("run_shell", 10, 6)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.terminated == null
}

test_rate_limit_half_open_window if {
	# The k-th most recent allowed action at exactly t - window no longer counts.
	edge := object.union(inp("pay", 10, 0), {"rate_kth_age_ns": 10000000000})
	v := guard.verdict with input as edge with data.lineage.policy.rule as pay
		with data.lineage.policy.rate_window_ns as 10000000000
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.decision == "allow"
	inside := object.union(inp("pay", 10, 0), {"rate_kth_age_ns": 9999999999})
	w := guard.verdict with input as inside with data.lineage.policy.rule as pay
		with data.lineage.policy.rate_window_ns as 10000000000
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	w.reason == "rate_limited"
	w.scar == "minor"
}

test_max_calls_counts_this_tool if {
	at_cap := object.union(inp("pay", 10, 0), {"state": object.union(state(10, 0), {"calls": {"pay": 3}, "tool_calls": 3})})
	v := guard.verdict with input as at_cap with data.lineage.policy.rule as pay
		with data.lineage.policy.max_calls as 3
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.reason == "max_calls_exceeded"
	v.scar == "minor"
}

test_insufficient_budget_no_scar if {
	v := guard.verdict with input as inp("pay", 1, 0) with data.lineage.policy.rule as pay
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.reason == "insufficient_budget"
	v.scar == "none"
	v.terminated == null
}

test_budget_exhausted_exactly_zero if {
	v := guard.verdict with input as inp("pay", 2, 0) with data.lineage.policy.rule as pay
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.decision == "allow"
	v.terminated == "budget_exhausted"
}

test_max_calls_below_cap_allows if {
	v := guard.verdict with input as inp("pay", 10, 0) with data.lineage.policy.rule as pay
		with data.lineage.policy.max_calls as 3
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.decision == "allow"
}

test_approval_required_is_pending if {
	v := guard.verdict with input as inp("wire", 10, 0) with data.lineage.policy.rule as wire
		with data.lineage.policy.needs_approval as true
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.decision == "pending"
	v.reason == "approval_required"
	v.cost == 0
}

test_approve_rechecks_budget_without_scar if {
	a := object.union(inp("wire", 4, 9), {"mode": "approve"})
	v := guard.verdict with input as a with data.lineage.policy.rule as wire
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.reason == "insufficient_budget"
	v.scar == "none"
	v.terminated == null
}

test_approve_allows if {
	a := object.union(inp("wire", 10, 0), {"mode": "approve"})
	v := guard.verdict with input as a with data.lineage.policy.rule as wire
		with data.lineage.policy.needs_approval as true
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.decision == "allow"
	v.cost == 5
}

test_reject if {
	v := guard.rejection
	v == {"decision": "deny", "reason": "approval_rejected", "cost": 0, "scar": "none", "weight": 0, "terminated": null}
}

test_cel_denial_before_budget if {
	denial := {"decision": "deny", "reason": "amount_over_limit", "scar": "severe", "cost": 0}
	v := guard.verdict with input as inp("pay", 0, 0) with data.lineage.policy.rule as pay
		with data.lineage.policy.constraint_denial as denial
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.reason == "amount_over_limit"
	v.terminated == "scar_limit_reached"
}
