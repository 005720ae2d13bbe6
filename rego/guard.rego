# The base library: SPEC §4 steps 3–8 and the terminations that follow a verdict.
#
# It reads the policy that the compiler generates (package lineage.policy) and the
# input the runtime builds:
#
#   input.mode             "request" | "approve"
#   input.request          {id, tool, args, at_ns} (and at, RFC 3339, for extensions)
#   input.state            {budget, spent, remaining, scar_score, calls, tool_calls}
#   input.rate_kth_age_ns  (only once there have been max_actions allowed actions)
#
# tool_calls is calls[tool] (0 if absent). rate_kth_age_ns is how long ago (t
# minus its time) the max_actions-th most recent allowed action was: "at least k
# allowed actions in (t - w, t]" is "the k-th most recent one is less than w
# old", since no recorded time is later than t. Steps 1-2 (retries, sealed
# logs) are bookkeeping in the runtime.
#
# From the generated policy it reads: rule (the matched tool rule, undefined for
# an unlisted tool), max_calls and needs_approval (defined only for the tools
# they apply to, found by OPA's rule index), constraint_denial (the first CEL
# failure, else the strongest extension denial), rate_window_ns, scar_weights
# and scar_limit.
#
# The results are data.lineage.guard.verdict (a request or an approval) and
# data.lineage.guard.rejection, each one object:
#   {decision, reason, cost, scar ("none" | severity), weight, terminated (null | reason)}
#
# verdict is one rule whose branches are the steps in order, the first that
# applies deciding. An allowed request walks every branch, so each branch is
# one cheap check: that is most of what a decision costs in OPA.
package lineage.guard

import data.lineage.policy

verdict := denial("unlisted_tool", "moderate") if {
	not policy.rule
} else := denial("rate_limited", "minor") if {
	input.rate_kth_age_ns < policy.rate_window_ns
} else := denial("max_calls_exceeded", "minor") if {
	input.state.tool_calls >= policy.max_calls
} else := denial(d.reason, d.scar) if {
	d := policy.constraint_denial
} else := {"decision": "deny", "reason": "insufficient_budget", "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	policy.rule.cost > input.state.remaining
} else := {"decision": "pending", "reason": "approval_required", "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	policy.needs_approval
	input.mode == "request"
} else := {"decision": "allow", "reason": "ok", "cost": policy.rule.cost, "scar": "none", "weight": 0, "terminated": "budget_exhausted"} if {
	policy.rule.cost > 0
	input.state.remaining == policy.rule.cost
} else := {"decision": "allow", "reason": "ok", "cost": policy.rule.cost, "scar": "none", "weight": 0, "terminated": null}

# rejection is a person's no to a pending request (§7).
rejection := {"decision": "deny", "reason": "approval_rejected", "cost": 0, "scar": "none", "weight": 0, "terminated": null}

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
