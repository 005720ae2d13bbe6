package lineage.ext.from_file

deny contains {"reason": "x"} if {
	input.request.tool == == "pay"
}
