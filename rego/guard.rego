# The base library: SPEC §4 steps 3–8 and the terminations that follow a verdict.
#
# It reads the policy that the compiler generates (package lineage.policy) and the
# input the runtime builds:
#
#   input.mode         "request" | "approve" | "reject"
#   input.request      {id, tool, args, at, at_ns}
#   input.state        {budget, spent, remaining, scar_score, calls}
#   input.rate_kth_age_ns  (only once there have been max_actions allowed actions)
#
# rate_kth_age_ns is how long ago (t minus its time) the max_actions-th most
# recent allowed action was: "at least k allowed actions in (t - w, t]" is "the
# k-th most recent one is less than w old", since no recorded time is later
# than t. Steps 1-2 (retries, sealed logs) are bookkeeping in the runtime.
#
# The result is one object, data.lineage.guard.verdict:
#   {decision, reason, cost, scar ("none" | severity), weight, terminated (null | reason)}
#
# verdict is one rule whose branches are the steps in order: the first that
# applies decides. Keeping it to one rule (and the matched tool rule, which
# OPA's index finds by the tool name) is what keeps an evaluation cheap.
package lineage.guard

import data.lineage.policy

verdict := {"decision": "deny", "reason": "approval_rejected", "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	input.mode == "reject"
} else := denial("unlisted_tool", "moderate") if {
	not policy.rule
} else := denial("rate_limited", "minor") if {
	input.rate_kth_age_ns < policy.rate_window_ns
} else := denial("max_calls_exceeded", "minor") if {
	cap := policy.rule.max_calls
	cap != null
	object.get(input.state.calls, input.request.tool, 0) >= cap
} else := denial(d.reason, d.scar) if {
	d := policy.cel_denial
} else := denial(d.reason, d.scar) if {
	d := policy.ext_denial
} else := {"decision": "deny", "reason": "insufficient_budget", "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	policy.rule.cost > input.state.remaining
} else := pending if {
	input.mode == "request"
	policy.rule.requires_approval
} else := pending if {
	input.mode == "request"
	policy.ext_requires_approval
} else := allow(policy.rule.cost)

pending := {"decision": "pending", "reason": "approval_required", "cost": 0, "scar": "none", "weight": 0, "terminated": null}

# denial is a deny with its scar; an approval re-runs the checks, but a failure
# then is not the agent's doing (§7), so it leaves no scar.
denial(reason, scar) := {"decision": "deny", "reason": reason, "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	input.mode != "request"
} else := {"decision": "deny", "reason": reason, "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	scar == "none"
} else := {"decision": "deny", "reason": reason, "cost": 0, "scar": scar, "weight": w, "terminated": "scar_limit_reached"} if {
	w := policy.scar_weights[scar]
	input.state.scar_score + w >= policy.scar_limit
} else := {"decision": "deny", "reason": reason, "cost": 0, "scar": scar, "weight": policy.scar_weights[scar], "terminated": null}

# allow charges the cost; spending the last credit ends the agent.
allow(cost) := {"decision": "allow", "reason": "ok", "cost": cost, "scar": "none", "weight": 0, "terminated": "budget_exhausted"} if {
	cost > 0
	input.state.remaining == cost
} else := {"decision": "allow", "reason": "ok", "cost": cost, "scar": "none", "weight": 0, "terminated": null}
