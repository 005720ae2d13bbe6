// Package mcpproxy owns the MCP proxy of docs/mcp.md (`lineagec mcp`): an MCP
// server for a host that shows an upstream MCP server's tools as far as an
// agent's policy admits them, makes every tools/call a request of that agent
// to the guard service (through package client), forwards what is allowed or
// approved, answers what is not with results a model can read, and refuses
// pinned tools whose upstream definition changed. It is built on the official
// Go SDK (github.com/modelcontextprotocol/go-sdk/mcp). Decisions stay with
// the service; the proxy keeps only the calls that wait for an approval.
package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/internal/gogc"
	"github.com/lineage-guard/lineage/internal/strictjson"
)

// Version is the proxy's implementation version in MCP handshakes.
const Version = "0.1.0"

// progressLinger is how long an upstream progress token is still relayed
// after its call returned.
const progressLinger = 2 * time.Second

// DefaultApprovalWait is how long a pending call waits for its decision (docs/mcp.md).
const DefaultApprovalWait = 50 * time.Second

// GCPercent is the garbage collector's target percentage for a process that
// serves a proxy (decision D163 ('lineagec mcp' runs its GC at 400 %)). The SDK allocates a 32 KiB buffer for each
// JSON value it decodes, several for each message, so at Go's default of 100
// a proxy's small heap is collected every few calls, and while a call waits
// for the guard service, the collector's idle workers take the CPU that the
// service (another process, often on the same cores) needs to answer it.
const GCPercent = 400

// SetGCPercent gives the process GCPercent unless $GOGC chooses for it, and
// says whether it did. `lineagec mcp` calls it; a program that embeds a
// proxy may.
func SetGCPercent() bool { return gogc.Default(GCPercent) }

// Config configures a Proxy.
type Config struct {
	// Guard is the client of the guard service, with the agent's token.
	Guard *client.Client
	// Upstream connects to the upstream MCP server (an *mcp.CommandTransport
	// for a subprocess, an *mcp.StreamableClientTransport for HTTP).
	Upstream mcp.Transport
	// ApprovalWait bounds the wait of a pending call (0: DefaultApprovalWait).
	ApprovalWait time.Duration
	// StateDir holds the open calls (state.go); "" means the user's cache
	// directory, lineage/mcp.
	StateDir string
	// Stderr gets the proxy's reports (changed pins, hidden tools); nil discards them.
	Stderr io.Writer
}

// Proxy is one running proxy: an upstream session and the server a host talks to.
type Proxy struct {
	cfg    Config
	agent  string
	rules  rules
	up     *mcp.ClientSession
	server *mcp.Server
	calls  *openCalls
	// stripes serialize identical calls by their key's first byte (call.go).
	stripes [256]sync.Mutex
	errw    io.Writer
	errMu   sync.Mutex

	syncMu  sync.Mutex // one syncTools at a time
	mu      sync.Mutex
	tools   map[string]*mcp.Tool // upstream tools by name, as last listed
	visible map[string]bool      // names shown downstream
	changed map[string]string    // pinned tools whose definition differs: name → its digest now
	// sent are the definitions the host is sent, by name: the canonical
	// JSON of everything the upstream listed for the tool, as pinned
	// (D241 (pins over the whole definition)).
	sent map[string]json.RawMessage
	// capture reads the definitions off the upstream connection.
	capture *toolCapture
	// terminated is why the agent was terminated when the proxy started
	// ("" if it was not): it then lists no tools (D244 (a terminated
	// agent's proxy lists nothing)).
	terminated string

	progMu   sync.Mutex
	progress map[string]progressRoute // upstream progress token → the host's
	progSeq  uint64
}

type progressRoute struct {
	session *mcp.ServerSession
	token   any
}

// rules is what the proxy reads of the agent's normalized policy.
type rules struct {
	tools       map[string]string // listed tool → its pin ("" if none)
	defaultRule bool
	digest      string
}

func parseRules(digest string, doc json.RawMessage) (rules, error) {
	var p struct {
		Tools map[string]struct {
			Pin string `json:"pin"`
		} `json:"tools"`
		DefaultRule json.RawMessage `json:"default_rule"`
	}
	// Exact member names (D376, the proxy's state file and a log's records
	// read strictly): the service's policy as the compiler reads it.
	if err := strictjson.UnmarshalOpen(doc, &p, 0); err != nil {
		return rules{}, fmt.Errorf("mcpproxy: the agent's policy: %w", err)
	}
	r := rules{tools: map[string]string{}, digest: digest}
	for name, t := range p.Tools {
		r.tools[name] = t.Pin
	}
	r.defaultRule = len(p.DefaultRule) > 0 && string(p.DefaultRule) != "null"
	return r, nil
}

// New asks the service who the token is and what its policy is, connects to
// the upstream, and builds the downstream server. The service unreachable is
// an error: a proxy that cannot decide does not start.
func New(ctx context.Context, cfg Config) (*Proxy, error) {
	if cfg.Guard == nil || cfg.Upstream == nil {
		return nil, errors.New("mcpproxy: a guard client and an upstream are required")
	}
	if cfg.ApprovalWait <= 0 {
		cfg.ApprovalWait = DefaultApprovalWait
	}
	who, err := cfg.Guard.WhoAmI(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: asking the guard service who the token is: %w", err)
	}
	if who.Agent == "" {
		return nil, fmt.Errorf("mcpproxy: the token is %s's (%s), not an agent's: the proxy needs an agent token", who.Name, who.Role)
	}
	digest, doc, err := cfg.Guard.Policy(ctx, who.Agent)
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: reading agent %s's policy: %w", who.Agent, err)
	}
	r, err := parseRules(digest, doc)
	if err != nil {
		return nil, err
	}
	dir := cfg.StateDir
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("mcpproxy: no state directory given and no user cache directory: %w", err)
		}
		dir = filepath.Join(cache, "lineage", "mcp")
	}
	st, err := cfg.Guard.State(ctx, who.Agent)
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: reading agent %s's state: %w", who.Agent, err)
	}
	calls, err := newOpenCalls(dir, who.Agent)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, agent: who.Agent, rules: r, calls: calls, errw: cfg.Stderr,
		tools: map[string]*mcp.Tool{}, visible: map[string]bool{}, changed: map[string]string{},
		sent: map[string]json.RawMessage{}, capture: newToolCapture(), progress: map[string]progressRoute{}}
	if p.errw == nil {
		p.errw = io.Discard
	}
	if st.Status == lineage.Terminated {
		p.terminated = string(st.Termination)
		if p.terminated == "" {
			p.terminated = "terminated"
		}
		p.report("agent %s is terminated (%s): the proxy lists no tools, and the guard denies every call", who.Agent, p.terminated)
	}
	p.server = mcp.NewServer(&mcp.Implementation{Name: "lineage-mcp", Version: Version}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	p.server.AddReceivingMiddleware(p.intercept)
	cl := mcp.NewClient(&mcp.Implementation{Name: "lineage-mcp", Version: Version}, &mcp.ClientOptions{
		// No roots (the SDK's default): the proxy does not relay the host's,
		// and an empty list would tell a server there are none (D110: what is proxied).
		Capabilities: &mcp.ClientCapabilities{},
		// The SDK runs notification handlers on the connection's reading
		// loop: listing from inside one would wait for itself.
		// It may come before Connect returns: use the request's session.
		ToolListChangedHandler: func(_ context.Context, req *mcp.ToolListChangedRequest) {
			go func() {
				if err := p.syncTools(context.Background(), req.Session); err != nil {
					p.report("following the upstream's changed tool list: %v", err)
				}
			}()
		},
		ProgressNotificationHandler: p.relayProgress,
	})
	p.up, err = cl.Connect(ctx, p.capture.wrap(cfg.Upstream), nil)
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: connecting to the upstream MCP server: %w", err)
	}
	if err := p.syncTools(ctx, p.up); err != nil {
		p.up.Close()
		return nil, err
	}
	return p, nil
}

// Agent is the agent whose requests the proxy makes.
func (p *Proxy) Agent() string { return p.agent }

// Server is the MCP server to serve to a host (Run it on a transport, or
// wrap it with mcp.NewStreamableHTTPHandler).
func (p *Proxy) Server() *mcp.Server { return p.server }

// Upstream is the session with the upstream server.
func (p *Proxy) Upstream() *mcp.ClientSession { return p.up }

// Close ends the upstream session (and a subprocess upstream).
func (p *Proxy) Close() error { return p.up.Close() }

// report prints one line on the proxy's stderr.
func (p *Proxy) report(format string, args ...any) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	fmt.Fprintf(p.errw, "lineagec mcp: "+format+"\n", args...)
}

// admits says whether the policy can admit a tool name (docs/mcp.md: listed, or any
// with a default rule).
func (r rules) admits(name string) bool {
	_, listed := r.tools[name]
	return listed || r.defaultRule
}

// syncTools lists the upstream's tools and makes the downstream list the
// admitted ones whose pins hold; the SDK tells the host of a change.
func (p *Proxy) syncTools(ctx context.Context, up *mcp.ClientSession) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	fresh := map[string]*mcp.Tool{}
	p.capture.reset()
	for t, err := range up.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("mcpproxy: listing the upstream's tools: %w", err)
		}
		fresh[t.Name] = t
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []string
	for name := range p.visible {
		if _, ok := fresh[name]; !ok {
			gone = append(gone, name)
			delete(p.visible, name)
		}
	}
	changed := map[string]string{}
	sent := map[string]json.RawMessage{}
	for name, t := range fresh {
		show := p.rules.admits(name) && p.terminated == ""
		raw, ok := p.capture.definition(name)
		var d string
		var def []byte
		var err error
		if ok {
			d, def, err = Pin(raw)
		}
		if !ok || err != nil {
			if show {
				why := "its list holds no definition named exactly so"
				if err != nil {
					why = err.Error()
				}
				p.report("tool %q: hidden: the proxy could not read its definition as the upstream sent it (%s)", name, why)
			}
			show = false
		}
		if pin := p.rules.tools[name]; pin != "" {
			if !ok || err != nil || d != pin {
				changed[name] = d
				show = false
				if _, known := p.changed[name]; !known {
					p.report("tool %q: its upstream definition (%s) differs from the policy's pin %s: it is hidden and its calls are refused (tool_definition_changed)", name, d, pin)
				}
			}
		}
		if !show {
			if p.visible[name] {
				gone = append(gone, name)
				delete(p.visible, name)
			}
			continue
		}
		sent[name] = def
		if p.visible[name] && bytes.Equal(p.sent[name], def) {
			continue
		}
		if err := addTool(p.server, t); err != nil {
			p.report("tool %q: hidden: %v", name, err)
			if p.visible[name] {
				gone = append(gone, name)
				delete(p.visible, name)
			}
			continue
		}
		p.visible[name] = true
	}
	if len(gone) > 0 {
		p.server.RemoveTools(gone...)
	}
	p.tools, p.changed, p.sent = fresh, changed, sent
	return nil
}

// agentTerminated hides every tool once the guard says the agent is
// terminated (D244 (a terminated agent's proxy lists nothing)); the SDK
// tells the host its list changed.
func (p *Proxy) agentTerminated(why string) {
	if why == "" {
		why = "terminated"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminated != "" {
		return
	}
	p.terminated = why
	p.report("agent %s is terminated (%s): the proxy lists no tools any more, and the guard denies every call", p.agent, why)
	var gone []string
	for name := range p.visible {
		gone = append(gone, name)
	}
	p.visible = map[string]bool{}
	if len(gone) > 0 {
		p.server.RemoveTools(gone...)
	}
}

// addTool shows an upstream tool downstream as it is; the handler is never
// called (intercept answers every tools/call). The SDK panics on a tool
// without an object input schema: that tool is hidden instead.
func addTool(s *mcp.Server, t *mcp.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the SDK refuses its definition: %v", r)
		}
	}()
	s.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("mcpproxy: unreachable tool handler")
	})
	return nil
}

// intercept answers every tools/call itself (hidden tools included, which the
// SDK would refuse as unknown) and passes every other method on.
func (p *Proxy) intercept(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		ctr, ok := req.(*mcp.CallToolRequest)
		if !ok || ctr.Params == nil {
			return next(ctx, method, req)
		}
		return p.call(ctx, ctr)
	}
}

// relayProgress passes an upstream progress notification to the host whose
// forwarded call it is about, under the host's own token.
func (p *Proxy) relayProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	key := fmt.Sprint(req.Params.ProgressToken)
	p.progMu.Lock()
	route, ok := p.progress[key]
	p.progMu.Unlock()
	if !ok {
		return
	}
	params := *req.Params
	params.ProgressToken = route.token
	_ = route.session.NotifyProgress(ctx, &params)
}

// routeProgress gives a forwarded call an upstream progress token of the
// proxy's own; the returned func forgets it.
func (p *Proxy) routeProgress(ss *mcp.ServerSession, token any) (string, func()) {
	p.progMu.Lock()
	defer p.progMu.Unlock()
	p.progSeq++
	up := fmt.Sprintf("lineage-%d", p.progSeq)
	p.progress[up] = progressRoute{session: ss, token: token}
	// The route outlives the call a little: the SDK may hand the call its
	// result before it has handled the upstream's last notifications.
	return up, func() {
		time.AfterFunc(progressLinger, func() {
			p.progMu.Lock()
			delete(p.progress, up)
			p.progMu.Unlock()
		})
	}
}
