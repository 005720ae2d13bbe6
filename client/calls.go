package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/canon"
	"github.com/lineage-guard/lineage/internal/strictjson"
	"github.com/lineage-guard/lineage/policy"
)

// What the front ends that stand between a model and its tools (the MCP
// proxy, the coding-agent hook) share: how a call is named, and the text a
// model reads for a denial.

// DecodeArgs decodes a call's arguments as a request's args with the one
// strict reader the service uses (internal/strictjson: a duplicate key, invalid
// Unicode or a number a double does not hold as written is refused, as the
// service refuses it) and returns their canonical encoding (RFC 8785, the
// form the action record holds: 1.50 is 1.5). Absent or null arguments are no
// args; anything but an object is an error.
func DecodeArgs(raw json.RawMessage) (map[string]any, []byte, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, []byte("{}"), nil
	}
	v, err := strictjson.Decode(t, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, nil, errors.New("arguments must be a JSON object")
	}
	enc, err := json.Marshal(args)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	doc, err := canon.Transform(enc)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	return args, doc, nil
}

// CallKey names a call by its tool and canonical args (decision D111 (a
// call key of tool and canonical args)): the same call made again has the
// same key, so it can continue the request that an earlier one left waiting
// for approval. It is the hex of canon.Digest over the tool's JSON string, a
// newline and the args.
func CallKey(tool string, canonArgs []byte) string {
	name, _ := json.Marshal(tool)
	b := append(append(append(make([]byte, 0, len(name)+1+len(canonArgs)), name...), '\n'), canonArgs...)
	return strings.TrimPrefix(canon.Digest(b), canon.Prefix)
}

// hints say what a model can do about a denial's reason.
var hints = map[string]string{
	"unlisted_tool":       "the tool is not in the agent's policy: do not call it again",
	"rate_limited":        "too many calls in a short time: wait before calling again",
	"max_calls_exceeded":  "the tool has been called as many times as the policy allows: do not call it again",
	"invalid_args":        "the arguments do not have the shape the policy requires for this tool (its args_schema): fix their types and required fields before calling again",
	"too_many_pending":    "too many of the agent's calls already wait for a person's approval: wait for them to be decided before asking for another",
	"insufficient_budget": "the agent has too few credits left for it",
	"approval_rejected":   "a person rejected this call: do not repeat it",
}

// DenyText is the one sentence a model reads for a denial (docs/mcp.md): the
// tool, the reason, the scar, the budget left (when st is the agent's state;
// nil when it could not be read), whether the agent is terminated; for an
// unlisted tool, the closest of the policy's tools (known; nil when not at
// hand) as D304 (did you mean, for tools) says.
func DenyText(tool string, v lineage.Verdict, st *lineage.State, known []string) string {
	var b strings.Builder
	if v.Reason == "terminated" {
		fmt.Fprintf(&b, "lineage denied the call to %q: the agent is terminated and may not act any more; nothing was forwarded, and no later call will be.", tool)
		return b.String()
	}
	fmt.Fprintf(&b, "lineage denied the call to %q (reason: %s", tool, v.Reason)
	if h, ok := hints[v.Reason]; ok {
		fmt.Fprintf(&b, "; %s", h)
	}
	if v.Reason == "unlisted_tool" {
		if h := policy.DidYouMean(tool, known); h != "" {
			fmt.Fprintf(&b, "; %s", h)
		}
	}
	b.WriteString(")")
	if v.Note != "" {
		fmt.Fprintf(&b, "; the approver's note: %q", v.Note)
	}
	if v.Scar != nil {
		fmt.Fprintf(&b, "; it left a %s scar (weight %d)", v.Scar.Severity, v.Scar.Weight)
	} else {
		b.WriteString("; no scar")
	}
	if st != nil {
		fmt.Fprintf(&b, "; %d of %d credits left", st.Remaining, st.Budget)
	}
	if v.Terminated != "" {
		fmt.Fprintf(&b, "; the agent is now terminated (%s), so every later call will be denied.", v.Terminated)
	} else {
		b.WriteString("; the agent may go on.")
	}
	return b.String()
}
