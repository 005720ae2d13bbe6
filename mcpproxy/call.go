package mcpproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
)

// Meta keys of the results the proxy writes itself.
const (
	// MetaVerdict holds the service's verdict on a call that was not forwarded.
	MetaVerdict = "lineage/verdict"
	// MetaRefusal holds {reason, …} of a call the proxy refused without a
	// verdict (decision D115 (the proxy's own refusals)): tool_definition_changed, guard_unavailable,
	// malformed_request, already_forwarded.
	MetaRefusal = "lineage/refusal"
)

// Reasons of the proxy's own refusals.
const (
	ReasonDefinitionChanged = "tool_definition_changed"
	ReasonGuardUnavailable  = "guard_unavailable"
	ReasonMalformed         = "malformed_request"
	ReasonAlreadyForwarded  = "already_forwarded"
	ReasonUnavailable       = "tool_unavailable"
	// ReasonTooManyRequests: the agent's token is over its request quota at
	// the service (429, docs/service.md): nothing was recorded or forwarded.
	ReasonTooManyRequests = "too_many_requests"
)

// decideTimeout bounds one exchange with the service that the host's
// cancellation does not cut short.
const decideTimeout = 30 * time.Second

// progressEvery is how often a waiting call asks the service again and
// sends the host a progress notification.
const progressEvery = 5 * time.Second

// call answers one tools/call (docs/mcp.md).
func (p *Proxy) call(ctx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	name := req.Params.Name
	args, canon, err := decodeArgs(req.Params.Arguments)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("tools/call %q: %v", name, err)}
	}
	p.mu.Lock()
	digest, changed := p.changed[name]
	p.mu.Unlock()
	if changed {
		p.report("refused a call to %q: its definition changed (now %s, pinned %s)", name, digest, p.rules.tools[name])
		return refusal(ReasonDefinitionChanged, fmt.Sprintf(
			"lineage refused the call to %q without forwarding it: the tool's definition on the upstream server (%s) is not the one the policy pins (%s), so it may have been altered; do not call it until a person has reviewed it and updated the pin.",
			name, digest, p.rules.tools[name]), map[string]any{"tool": name, "digest": digest, "pin": p.rules.tools[name]}), nil
	}
	p.mu.Lock()
	_, listed := p.tools[name]
	p.mu.Unlock()
	if pin := p.rules.tools[name]; pin != "" && !listed {
		p.report("refused a call to %q: the upstream no longer lists this pinned tool", name)
		return refusal(ReasonUnavailable, fmt.Sprintf(
			"lineage refused the call to %q without forwarding it: the upstream server no longer lists this tool, so the definition the policy pins (%s) cannot be checked; nothing was done. Do not call it again unless it is listed again.",
			name, pin), map[string]any{"tool": name, "pin": pin}), nil
	}
	// What the upstream gets: the args as the action record holds them, the
	// RFC 8785 canonical JSON of the args the service decides (D242 (the
	// upstream gets the record's args bytes)).
	forwarded := canon
	key := callKey(name, canon)
	id, recorded, v, err, local := p.begin(ctx, key, name, args)
	if local != nil {
		return p.unavailable(name, local), nil
	}
	if err != nil {
		return p.guardError(ctx, name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err // cancelled by the host: nothing is forwarded
	}
	if v.Decision == lineage.Pending {
		v, err = p.wait(ctx, req, id, v)
		if err != nil {
			return p.guardError(ctx, name, err)
		}
	}
	switch v.Decision {
	case lineage.Pending:
		return verdictResult(v, fmt.Sprintf(
			"The call to %q waits for a person's approval (request %s); nothing has been done yet. Calling %q again with the same arguments goes on waiting for the same request; meanwhile you may do something else.",
			name, v.RequestID, name)), nil
	case lineage.Allow:
		if err := ctx.Err(); err != nil {
			return nil, err // cancelled by the host before it was forwarded: it is not
		}
		took, err := p.calls.claim(key, id, recorded)
		if err != nil {
			return p.unavailable(name, err), nil
		}
		if !took {
			return refusal(ReasonAlreadyForwarded, fmt.Sprintf(
				"The approved request %s for %q was forwarded by another call with the same arguments; this call was not forwarded again. Call it again to make a new request.",
				id, name), map[string]any{"tool": name, "request_id": id}), nil
		}
		return p.forward(ctx, req, forwarded)
	default:
		if v.Terminated != "" || v.Reason == "terminated" {
			p.agentTerminated(string(v.Terminated))
		}
		if recorded {
			if err := p.calls.drop(key, id); err != nil {
				p.report("forgetting the open call %s: %v", id, err)
			}
		}
		return verdictResult(v, p.denyText(ctx, name, v)), nil
	}
}

// begin continues the open request of a call key, or makes a new request,
// and records it as open when it is pending. Identical calls in this process
// take turns here, so that the later one continues the earlier one's request.
// err is the service's error; local is one of the proxy's own state.
func (p *Proxy) begin(ctx context.Context, key, name string, args map[string]any) (id string, recorded bool, v lineage.Verdict, err, local error) {
	stripe := &p.stripes[int(hexByte(key))]
	stripe.Lock()
	defer stripe.Unlock()
	// A host that cancels now must not leave a request the service recorded
	// as pending and the proxy never heard of: the exchange runs to its end.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), decideTimeout)
	defer cancel()
	if id, local = p.calls.lookup(key); local != nil {
		return
	}
	if recorded = id != ""; recorded {
		v, err = p.cfg.Guard.Verdict(ctx, p.agent, id, 0)
		if errors.Is(err, lineage.ErrUnknownRequest) {
			// The open call is not the service's (another store): forget it.
			if local = p.calls.drop(key, id); local != nil {
				return
			}
			recorded, err = false, nil
		}
	}
	if !recorded {
		id = newID(key)
		v, err = p.cfg.Guard.Request(ctx, p.agent, lineage.Request{ID: id, Tool: name, Args: args})
		if err == nil && v.Decision == lineage.Pending {
			local = p.calls.open(key, id)
			recorded = true
		}
	}
	return
}

// wait holds a pending request until it is decided or ApprovalWait passes,
// telling the host how long it has waited when the call has a progress token.
func (p *Proxy) wait(ctx context.Context, req *mcp.CallToolRequest, id string, v lineage.Verdict) (lineage.Verdict, error) {
	start := time.Now()
	deadline := start.Add(p.cfg.ApprovalWait)
	token := req.Params.GetProgressToken()
	for v.Decision == lineage.Pending {
		rem := time.Until(deadline).Truncate(time.Millisecond)
		if rem <= 0 {
			return v, nil
		}
		if token != nil && req.Session != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      time.Since(start).Seconds(),
				Total:         p.cfg.ApprovalWait.Seconds(),
				Message:       fmt.Sprintf("waiting for a person to approve request %s", id),
			})
		}
		var err error
		if v, err = p.cfg.Guard.Verdict(ctx, p.agent, id, min(rem, progressEvery)); err != nil {
			return v, err
		}
	}
	return v, nil
}

// forward calls the upstream with the arguments as decided (the action
// record's args bytes, recordArgs) and returns its result unchanged; the upstream's progress goes to the host.
func (p *Proxy) forward(ctx context.Context, req *mcp.CallToolRequest, canon []byte) (mcp.Result, error) {
	params := &mcp.CallToolParams{Name: req.Params.Name, Arguments: json.RawMessage(canon)}
	if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
		up, done := p.routeProgress(req.Session, token)
		defer done()
		params.Meta = mcp.Meta{}
		for k, val := range req.Params.Meta {
			params.Meta[k] = val
		}
		params.Meta["progressToken"] = up
	}
	res, err := p.up.CallTool(ctx, params)
	if err != nil {
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) {
			return nil, rpc // the upstream's own protocol error, passed through
		}
		return nil, fmt.Errorf("mcpproxy: the upstream failed the call to %q: %w", req.Params.Name, err)
	}
	return res, nil
}

// guardError answers a call the service did not decide: fail closed.
func (p *Proxy) guardError(ctx context.Context, name string, err error) (mcp.Result, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var ce *api.Error
	if errors.As(err, &ce) && errors.Is(err, lineage.ErrTooManyRequests) {
		// A refusal the model can act on, never a forward (D264 (a 429 is "slow down")).
		return refusal(ReasonTooManyRequests, fmt.Sprintf(
			"lineage refused the call to %q without recording or forwarding it: this agent is calling tools faster than its request quota allows. Slow down: wait a few seconds before calling any tool again, and do not retry in a loop.", name),
			map[string]any{"tool": name, "message": ce.Message}), nil
	}
	if errors.As(err, &ce) && errors.Is(err, lineage.ErrBadRequest) {
		return refusal(ReasonMalformed, fmt.Sprintf(
			"lineage refused the call to %q as malformed, and did not record or forward it: %s.", name, strings.TrimSuffix(ce.Message, ".")),
			map[string]any{"tool": name, "message": ce.Message}), nil
	}
	return p.unavailable(name, err), nil
}

// unavailable is the fail-closed answer when the proxy cannot know the verdict.
func (p *Proxy) unavailable(name string, err error) *mcp.CallToolResult {
	p.report("call to %q not forwarded: %v", name, err)
	return refusal(ReasonGuardUnavailable, fmt.Sprintf(
		"lineage could not get a decision on the call to %q (%v), so it was not forwarded; nothing was done. Try again later.", name, err),
		map[string]any{"tool": name, "message": err.Error()})
}

// denyText is the one sentence a model reads for a denial (docs/mcp.md), with the
// credits left when the agent's state can be read.
func (p *Proxy) denyText(ctx context.Context, tool string, v lineage.Verdict) string {
	var st *lineage.State
	if v.Reason != "terminated" {
		if s, err := p.cfg.Guard.State(ctx, p.agent); err == nil {
			st = &s
		}
	}
	return client.DenyText(tool, v, st, slices.Collect(maps.Keys(p.rules.tools)))
}

func verdictResult(v lineage.Verdict, text string) *mcp.CallToolResult {
	var m map[string]any
	if raw, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(raw, &m)
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
		Meta: mcp.Meta{MetaVerdict: m}}
}

func refusal(reason, text string, detail map[string]any) *mcp.CallToolResult {
	detail["reason"] = reason
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
		Meta: mcp.Meta{MetaRefusal: detail}}
}

// decodeArgs and callKey are the client's (shared with the coding-agent
// hook): the one strict reader, the RFC 8785 form the action record holds.
var (
	decodeArgs = client.DecodeArgs
	callKey    = client.CallKey
)

// hexByte is the value of a hex key's first two digits.
func hexByte(key string) byte {
	b, _ := hex.DecodeString(key[:2])
	return b[0]
}

// newID is a fresh request id for a call key: "mcp-", 16 hex digits of the
// key, "-", 16 random hex digits.
func newID(key string) string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return "mcp-" + key[:16] + "-" + hex.EncodeToString(r[:])
}
