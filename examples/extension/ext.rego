# A lineage extension (docs/extensions.md): e-mail may only go to our own domains, and a person
# must approve any payment over 1000. Extensions can only add denials and approval
# requirements; they never allow what the policy denies.
package lineage.ext.outbound

allowed_domains := {"acme.example", "partner.example"}

approval_threshold := 1000

# An e-mail to any other domain (or with no usable recipient) is a severe incident:
# with the default scar limit it terminates the agent at once.
deny contains {"reason": "recipient_domain_not_allowed", "scar": "severe"} if {
	input.request.tool == "send_email"
	not recipient_allowed
}

# A payment must say which invoice it pays.
deny contains {"reason": "payment_without_invoice", "scar": "moderate"} if {
	input.request.tool == "pay"
	not input.request.args.invoice
}

require_approval contains "large_payment" if {
	input.request.tool == "pay"
	input.request.args.amount > approval_threshold
}

# Negating a helper rule is true when args.to is missing or malformed: fail closed.
# is_string first: lower(5) would be a builtin error, and a failing extension
# denies extension_error without a scar (docs/extensions.md) where this one means a severe scar.
recipient_allowed if {
	is_string(input.request.args.to)
	parts := split(lower(input.request.args.to), "@")
	count(parts) == 2
	parts[1] in allowed_domains
}
