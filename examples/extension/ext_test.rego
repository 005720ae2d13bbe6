# OPA unit tests for ext.rego (Rego v1): opa test examples/extension, or lineagec test.
package lineage.ext.outbound_test

import data.lineage.ext.outbound

email(to) := {"request": {"tool": "send_email", "args": {"to": to}}}

payment(args) := {"request": {"tool": "pay", "args": args}}

severe_domain := {"reason": "recipient_domain_not_allowed", "scar": "severe"}

test_internal_recipient_is_not_denied if {
	count(outbound.deny) == 0 with input as email("bob@acme.example")
}

test_partner_recipient_is_not_denied if {
	count(outbound.deny) == 0 with input as email("ann@partner.example")
}

test_domain_comparison_ignores_case if {
	count(outbound.deny) == 0 with input as email("Bob@ACME.Example")
}

test_external_recipient_is_denied_severe if {
	severe_domain in outbound.deny with input as email("eve@evil.test")
}

test_lookalike_domain_is_denied if {
	severe_domain in outbound.deny with input as email("eve@acme.example.evil.test")
}

test_two_at_signs_are_denied if {
	severe_domain in outbound.deny with input as email("eve@evil.test@acme.example")
}

test_missing_recipient_is_denied if {
	severe_domain in outbound.deny with input as {"request": {"tool": "send_email", "args": {}}}
}

test_recipient_that_is_no_string_is_denied if {
	severe_domain in outbound.deny with input as email(5)
	severe_domain in outbound.deny with input as email(["bob@acme.example"])
}

test_recipient_rule_only_applies_to_email if {
	count(outbound.deny) == 0 with input as {"request": {"tool": "read_inbox", "args": {"to": "eve@evil.test"}}}
}

test_large_payment_requires_approval if {
	"large_payment" in outbound.require_approval with input as payment({"invoice": "INV-1", "amount": 1500})
}

test_threshold_itself_needs_no_approval if {
	count(outbound.require_approval) == 0 with input as payment({"invoice": "INV-1", "amount": 1000})
}

test_fractional_amount_over_threshold_requires_approval if {
	"large_payment" in outbound.require_approval with input as payment({"invoice": "INV-1", "amount": 1000.5})
}

test_payment_without_invoice_is_denied if {
	{"reason": "payment_without_invoice", "scar": "moderate"} in outbound.deny with input as payment({"amount": 5})
}

test_payment_with_invoice_is_not_denied if {
	count(outbound.deny) == 0 with input as payment({"invoice": "INV-7", "amount": 5})
}
