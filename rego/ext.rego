# Helpers for Rego extensions (docs/extensions.md). The compiler generates, for each extension
# package P, the rules that gather P.deny and P.require_approval into
# data.lineage.policy; this package turns the gathered denials into one.
package lineage.extlib

severity_rank := {"none": 0, "minor": 1, "moderate": 2, "severe": 3}

# reserved are the reasons an extension may not give: the runtime's own verdicts.
reserved := {"ok", "approval_required", "terminated", "extension_error", "invalid_extension_deny"}

# max_reason is the longest reason an extension may give, in characters.
max_reason := 128

# valid holds for a deny element of the form docs/extensions.md allows: an object with a
# reason (a string of 1 to 128 characters, not reserved) and a known scar
# (absent: moderate). Every test is guarded, so that nothing an extension
# writes makes a builtin fail here.
valid(d) if {
	is_object(d)
	is_string(d.reason)
	n := count(d.reason)
	n > 0
	n <= max_reason
	not reserved[d.reason]
	is_string(object.get(d, "scar", "moderate"))
	severity_rank[object.get(d, "scar", "moderate")]
}

# normalize turns one element of an extension's deny set into {reason, scar}.
# Anything malformed fails closed: a denial naming the problem, without a scar.
normalize(d) := {"reason": d.reason, "scar": object.get(d, "scar", "moderate")} if {
	valid(d)
} else := {"reason": "invalid_extension_deny", "scar": "none"}

# strongest is the denial of highest severity; ties go to the smallest reason.
strongest(denies) := {"decision": "deny", "reason": first[1], "scar": first[2], "cost": 0} if {
	count(denies) > 0
	ranked := sort([[0 - severity_rank[d.scar], d.reason, d.scar] | some d in denies])
	first := ranked[0]
}
