package lineage.extlib_test

import data.lineage.extlib

test_strongest_prefers_severity if {
	d := extlib.strongest({{"reason": "a", "scar": "minor"}, {"reason": "z", "scar": "severe"}})
	d.reason == "z"
	d.scar == "severe"
}

test_strongest_ties_smallest_reason if {
	d := extlib.strongest({{"reason": "b", "scar": "moderate"}, {"reason": "a", "scar": "moderate"}})
	d.reason == "a"
}

test_strongest_undefined_when_empty if {
	not extlib.strongest(set())
}

test_normalize_defaults_moderate if {
	extlib.normalize({"reason": "x"}) == {"reason": "x", "scar": "moderate"}
}

test_normalize_fails_closed if {
	extlib.normalize({"reason": 3}) == {"reason": "invalid_extension_deny", "scar": "none"}
	extlib.normalize("oops") == {"reason": "invalid_extension_deny", "scar": "none"}
	extlib.normalize({"reason": "x", "scar": "huge"}) == {"reason": "invalid_extension_deny", "scar": "none"}
}

test_normalize_reason_bounds if {
	extlib.normalize({"reason": ""}) == {"reason": "invalid_extension_deny", "scar": "none"}
	r128 := concat("", [x | some _ in numbers.range(1, 128); x := "é"])
	extlib.normalize({"reason": r128, "scar": "minor"}) == {"reason": r128, "scar": "minor"}
	r129 := concat("", [r128, "a"])
	extlib.normalize({"reason": r129, "scar": "minor"}) == {"reason": "invalid_extension_deny", "scar": "none"}
}

test_normalize_reserved_reasons if {
	every r in ["ok", "approval_required", "terminated", "extension_error", "invalid_extension_deny"] {
		extlib.normalize({"reason": r, "scar": "severe"}) == {"reason": "invalid_extension_deny", "scar": "none"}
	}
}

test_normalize_bad_scar if {
	extlib.normalize({"reason": "x", "scar": 3}) == {"reason": "invalid_extension_deny", "scar": "none"}
	extlib.normalize({"reason": "x", "scar": null}) == {"reason": "invalid_extension_deny", "scar": "none"}
	extlib.normalize({"reason": "x", "scar": ["minor"]}) == {"reason": "invalid_extension_deny", "scar": "none"}
	extlib.normalize({"reason": "x", "scar": "none"}) == {"reason": "x", "scar": "none"}
	extlib.normalize(["reason", "x"]) == {"reason": "invalid_extension_deny", "scar": "none"}
	extlib.normalize(null) == {"reason": "invalid_extension_deny", "scar": "none"}
}

test_invalid_deny_loses_to_a_scarred_one if {
	d := extlib.strongest({extlib.normalize(x) | some x in [{"reason": ""}, {"reason": "b", "scar": "minor"}]})
	d.reason == "b"
	d.scar == "minor"
}
