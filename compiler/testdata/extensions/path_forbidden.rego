package lineage.ext.from_file

deny contains {"reason": "flaky"} if {
	input.request.tool == "pay"
	rand.intn("x", 2) == 0
}
