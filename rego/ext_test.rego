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
