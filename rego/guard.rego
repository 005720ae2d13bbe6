# The base library: SPEC §4 steps 3–8 and the terminations that follow a verdict.
#
# It reads the policy that the compiler generates (package lineage.policy) and the
# input the runtime builds:
#
#   input.mode     "request" | "approve" | "reject"
#   input.request  {id, tool, args, at, at_ns}
#   input.state    {budget, spent, remaining, scar_score, calls}
#   input.rate_kth_ns  (only once there have been max_actions allowed actions)
#
# rate_kth_ns is the time of the max_actions-th most recent allowed action, present
# only once there have been max_actions allowed actions: "at least k allowed actions
# in (t - w, t]" is "the k-th most recent one is later than t - w", since no recorded
# time is later than t. Steps 1-2 (retries, sealed logs) are bookkeeping in the runtime.
#
# The result is one object, data.lineage.guard.verdict:
#   {decision, reason, cost, scar ("none" | severity), weight, terminated (null | reason)}
package lineage.guard

import data.lineage.policy

# check is the first rule of the decision order that applies; scars here are the
# ones a request would get (approvals strip them below).
check := _deny("approval_rejected", "none") if {
	input.mode == "reject"
} else := _deny("unlisted_tool", "moderate") if {
	not policy.rule
} else := _deny("rate_limited", "minor") if {
	rate_limited
} else := _deny("max_calls_exceeded", "minor") if {
	max_calls_exceeded
} else := policy.cel_denial if {
	policy.cel_denial
} else := policy.ext_denial if {
	policy.ext_denial
} else := _deny("insufficient_budget", "none") if {
	policy.rule.cost > input.state.remaining
} else := {"decision": "pending", "reason": "approval_required", "scar": "none", "cost": 0} if {
	input.mode == "request"
	requires_approval
} else := {"decision": "allow", "reason": "ok", "scar": "none", "cost": policy.rule.cost}

_deny(reason, scar) := {"decision": "deny", "reason": reason, "scar": scar, "cost": 0}

rate_limited if {
	input.rate_kth_ns > input.request.at_ns - policy.rate_window_ns
}

max_calls_exceeded if {
	cap := policy.rule.max_calls
	cap != null
	object.get(input.state.calls, input.request.tool, 0) >= cap
}

requires_approval if policy.rule.requires_approval

requires_approval if policy.ext_requires_approval

# An approval re-runs the checks, but a failure then is not the agent's doing (§7).
scar := "none" if {
	input.mode != "request"
} else := check.scar

weight := 0 if {
	scar == "none"
} else := policy.scar_weights[scar]

terminated := "scar_limit_reached" if {
	weight > 0
	input.state.scar_score + weight >= policy.scar_limit
} else := "budget_exhausted" if {
	check.decision == "allow"
	check.cost > 0
	input.state.remaining == check.cost
} else := null

verdict := {
	"decision": check.decision,
	"reason": check.reason,
	"cost": check.cost,
	"scar": scar,
	"weight": weight,
	"terminated": terminated,
}
