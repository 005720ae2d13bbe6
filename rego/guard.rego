# The base library: what every policy's decisions share. The compiler writes
# each policy's verdict (docs/decision-order.md steps 3-9, in package lineage.policy: one
# chain of branches, each tool's steps guarded by the tool; or, for more than
# 64 tools, a table of the tools and a chain of steps per shape of rule,
# decisions D29 (the generated verdict is one chain) and D60 (a policy of more than 64 tools is a table)); this package holds what those chains call:
#
#   denial(reason, scar)  a denial with its scar, and the termination the scar
#                         causes when the score reaches the limit (docs/decision-order.md);
#   rejection             a person's no to a pending request (docs/approvals.md).
#
# The input the runtime builds, whole for a policy with Rego extensions
# (which may read any of it, docs/extensions.md):
#
#   input.mode             "request" | "approve"
#   input.request          {id, tool, args, at (RFC 3339), at_ns}
#   input.state            {budget, spent, remaining, scar_score, calls, tool_calls}
#   input.rate_kth_age_ns  (only once there have been max_actions allowed actions)
#   input.pending_count    how many requests of the agent are pending (step 8,
#                          max_pending)
#   input.rule             the matched tool rule, every field present
#                          (Compiled.Rules)
#
# Other policies get what their rules read (Compiled.Reads): the generated
# verdict reads mode, request.tool, state.{remaining, scar_score, tool_calls}
# rate_kth_age_ns and pending_count; CEL constraints add request.{args, at_ns}, and the
# rest of state if one of them reads state.
#
# tool_calls is calls[tool] (0 if absent). rate_kth_age_ns is how long ago (t
# minus its time) the max_actions-th most recent allowed action was: "at least k
# allowed actions in (t - w, t]" is "the k-th most recent one is less than w
# old", since no recorded time is later than t. Steps 1-2 (retries, sealed
# logs) are bookkeeping in the runtime.
#
# Every verdict is one object:
#   {decision, reason, cost, scar ("none" | severity), weight, terminated (null | reason)}
package lineage.guard

import data.lineage.policy

# rejection is a person's no to a pending request (docs/approvals.md).
rejection := {"decision": "deny", "reason": "approval_rejected", "cost": 0, "scar": "none", "weight": 0, "terminated": null}

# denial is a deny with its scar; an approval re-runs the checks, but a failure
# then is not the agent's doing (docs/approvals.md), so it leaves no scar.
denial(reason, scar) := {"decision": "deny", "reason": reason, "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	input.mode != "request"
} else := {"decision": "deny", "reason": reason, "cost": 0, "scar": "none", "weight": 0, "terminated": null} if {
	scar == "none"
} else := {"decision": "deny", "reason": reason, "cost": 0, "scar": scar, "weight": w, "terminated": "scar_limit_reached"} if {
	w := policy.scar_weights[scar]
	input.state.scar_score + w >= policy.scar_limit
} else := {"decision": "deny", "reason": reason, "cost": 0, "scar": scar, "weight": policy.scar_weights[scar], "terminated": null}
