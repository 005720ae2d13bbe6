package lineage.ext.weekday

# Wires only on weekdays: the request time is part of the input, so replaying a
# log reproduces the verdict.
deny contains {"reason": "weekend_wire", "scar": "minor"} if {
	input.request.tool == "wire"
	time.weekday(input.request.at_ns) in {"Saturday", "Sunday"}
}

require_approval contains "costly_wire" if {
	input.request.tool == "wire"
	input.rule.cost > 0
	input.request.args.amount >= 1000
}
