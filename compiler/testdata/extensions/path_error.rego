package lineage.ext.from_file

# An unknown function, on line 5.
deny contains {"reason": "too_much"} if {
	limits.max_amount(input.request.tool) < input.request.args.amount
}
