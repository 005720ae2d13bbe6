package lineage.guard_test

import data.lineage.guard

weights := {"minor": 1, "moderate": 3, "severe": 10}

inp(mode, score) := {"mode": mode, "request": {"id": "r1", "tool": "pay", "args": {}, "at_ns": 10000000000}, "state": {"budget": 10, "spent": 0, "remaining": 10, "scar_score": score, "calls": {}, "tool_calls": 0}}

test_denial_scars_with_its_weight if {
	v := guard.denial("unlisted_tool", "moderate") with input as inp("request", 0)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v == {"decision": "deny", "reason": "unlisted_tool", "cost": 0, "scar": "moderate", "weight": 3, "terminated": null}
}

test_scar_limit_reached_exactly if {
	v := guard.denial("unlisted_tool", "moderate") with input as inp("request", 7)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.terminated == "scar_limit_reached"
}

test_scar_limit_one_short if {
	v := guard.denial("unlisted_tool", "moderate") with input as inp("request", 6)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.terminated == null
}

test_custom_weights if {
	v := guard.denial("rate_limited", "minor") with input as inp("request", 0)
		with data.lineage.policy.scar_weights as {"minor": 4, "moderate": 5, "severe": 6}
		with data.lineage.policy.scar_limit as 4
	v.weight == 4
	v.terminated == "scar_limit_reached"
}

test_scar_none_leaves_no_scar if {
	v := guard.denial("amount_over_limit", "none") with input as inp("request", 9)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v.scar == "none"
	v.weight == 0
	v.terminated == null
}

test_approval_recheck_leaves_no_scar if {
	v := guard.denial("max_calls_exceeded", "severe") with input as inp("approve", 9)
		with data.lineage.policy.scar_weights as weights with data.lineage.policy.scar_limit as 10
	v == {"decision": "deny", "reason": "max_calls_exceeded", "cost": 0, "scar": "none", "weight": 0, "terminated": null}
}

test_rejection if {
	guard.rejection == {"decision": "deny", "reason": "approval_rejected", "cost": 0, "scar": "none", "weight": 0, "terminated": null}
}
