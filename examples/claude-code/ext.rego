# A lineage extension (docs/extensions.md) for a coding agent: a person approves
# every `git push`. A CEL constraint can only deny; asking for approval on a
# condition is an extension's require_approval.
package lineage.ext.claude_code

# git push, git -C DIR push, after ; && || | or a subshell's ( as well.
require_approval contains "git_push" if {
	input.request.tool == "Bash"
	regex.match(`(^|[;&|(]|\s)git(\s+-C\s+\S+)?\s+push(\s|$)`, input.request.args.command)
}
