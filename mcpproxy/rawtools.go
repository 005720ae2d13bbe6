package mcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"

	jt "github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK decodes a tools/list into mcp.Tool, which keeps only the members it
// knows and writes some it was not sent (false hints). A pin covers the whole
// definition as the upstream sent it, and the host is sent exactly that
// (D241 (pins over the whole definition)), so the proxy reads the upstream's
// tools/list results off the connection (toolCapture) and writes the
// definitions it pinned into its own tools/list results (rewriteTools).

// idKey names a JSON-RPC id.
func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

// toolCapture keeps the tool definitions of the tools/list results read on
// a client connection, by exact name.
type toolCapture struct {
	mu      sync.Mutex
	pending map[string]bool // ids of tools/list requests written
	defs    map[string]json.RawMessage
}

func newToolCapture() *toolCapture {
	return &toolCapture{pending: map[string]bool{}, defs: map[string]json.RawMessage{}}
}

// reset forgets the definitions read so far (a new listing begins).
func (c *toolCapture) reset() {
	c.mu.Lock()
	c.defs = map[string]json.RawMessage{}
	c.mu.Unlock()
}

func (c *toolCapture) definition(name string) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.defs[name]
	return d, ok
}

func (c *toolCapture) wrap(t mcp.Transport) mcp.Transport { return &captureTransport{t, c} }

type captureTransport struct {
	inner mcp.Transport
	c     *toolCapture
}

func (t *captureTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &captureConn{conn, t.c}, nil
}

type captureConn struct {
	mcp.Connection
	c *toolCapture
}

func (cc *captureConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "tools/list" && r.ID.IsValid() {
		cc.c.mu.Lock()
		cc.c.pending[idKey(r.ID)] = true
		cc.c.mu.Unlock()
	}
	return cc.Connection.Write(ctx, msg)
}

// Read keeps the definitions of a tools/list result before the SDK sees it,
// so that they are there when the SDK's listing returns.
func (cc *captureConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := cc.Connection.Read(ctx)
	r, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok || !r.ID.IsValid() {
		return msg, err
	}
	cc.c.mu.Lock()
	defer cc.c.mu.Unlock()
	if !cc.c.pending[idKey(r.ID)] {
		return msg, err
	}
	delete(cc.c.pending, idKey(r.ID))
	var res struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil {
		return msg, err
	}
	for _, raw := range res.Tools {
		if name, ok := exactName(raw); ok {
			cc.c.defs[name] = append(json.RawMessage(nil), raw...)
		}
	}
	return msg, err
}

// exactName is a definition's member "name", spelled exactly so (not a
// member a case-insensitive reader would take for it). The definition is read
// by the one strict reader's tokenizer (D378, tool definitions read
// strictly): a member name twice anywhere in it or invalid Unicode, which
// two readers could take two ways, makes it no definition (the tool is left
// out). Its numbers are the server's and only pinned, so no number rule.
func exactName(raw json.RawMessage) (string, bool) {
	dec := jt.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	name, found := "", false
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		if tok.Kind() == '}' {
			break
		}
		if tok.String() != "name" {
			if dec.SkipValue() != nil {
				return "", false
			}
			continue
		}
		v, err := dec.ReadToken()
		if err != nil || v.Kind() != '"' {
			return "", false
		}
		name, found = v.String(), true
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return "", false
	}
	return name, found
}

// rewriteTools replaces every tool of a tools/list result by the definition
// the proxy pinned and decided to show under that name; a tool it has none
// for is left out.
func (p *Proxy) rewriteTools(result json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(result, &m) != nil {
		return result
	}
	var tools []json.RawMessage
	if json.Unmarshal(m["tools"], &tools) != nil {
		return result
	}
	p.mu.Lock()
	out := make([]json.RawMessage, 0, len(tools))
	for _, raw := range tools {
		name, ok := exactName(raw)
		if def, shown := p.sent[name]; ok && shown && p.visible[name] {
			out = append(out, def)
		}
	}
	p.mu.Unlock()
	var b bytes.Buffer
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		if k != "tools" {
			b.Write(m[k])
			continue
		}
		b.WriteByte('[')
		for j, d := range out {
			if j > 0 {
				b.WriteByte(',')
			}
			b.Write(d)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Transport wraps a host's transport so that the tools/list results the
// host reads carry the definitions as pinned. Serve the proxy's Server on
// it (Run), never on the bare transport.
func (p *Proxy) Transport(t mcp.Transport) mcp.Transport { return &hostTransport{t, p} }

// Run serves the proxy to one host on t until the host leaves.
func (p *Proxy) Run(ctx context.Context, t mcp.Transport) error {
	return p.server.Run(ctx, p.Transport(t))
}

// Connect serves the proxy to one host on t.
func (p *Proxy) Connect(ctx context.Context, t mcp.Transport) (*mcp.ServerSession, error) {
	return p.server.Connect(ctx, p.Transport(t), nil)
}

type hostTransport struct {
	inner mcp.Transport
	p     *Proxy
}

func (t *hostTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hostConn{Connection: conn, p: t.p, pending: map[string]bool{}}, nil
}

type hostConn struct {
	mcp.Connection
	p       *Proxy
	mu      sync.Mutex
	pending map[string]bool
}

func (hc *hostConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := hc.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Request); ok && err == nil && r.Method == "tools/list" && r.ID.IsValid() {
		hc.mu.Lock()
		hc.pending[idKey(r.ID)] = true
		hc.mu.Unlock()
	}
	return msg, err
}

func (hc *hostConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok && r.ID.IsValid() && r.Error == nil {
		hc.mu.Lock()
		listed := hc.pending[idKey(r.ID)]
		delete(hc.pending, idKey(r.ID))
		hc.mu.Unlock()
		if listed {
			cp := *r
			cp.Result = hc.p.rewriteTools(r.Result)
			msg = &cp
		}
	}
	return hc.Connection.Write(ctx, msg)
}

// maxHostBody bounds a host's HTTP message (the handler reads it whole).
const maxHostBody = 8 << 20

// Handler serves the proxy over streamable HTTP (one session per host), its
// tools/list results carrying the definitions as pinned: the body of a
// tools/list POST is read whole and its response rewritten.
func (p *Proxy) Handler() http.Handler {
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.server }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			inner.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxHostBody+1))
		if err != nil {
			http.Error(w, "reading the request body", http.StatusBadRequest)
			return
		}
		if len(body) > maxHostBody {
			http.Error(w, "the request body is over 8 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		msg, err := jsonrpc.DecodeMessage(body)
		req, ok := msg.(*jsonrpc.Request)
		if err != nil || !ok || req.Method != "tools/list" || !req.ID.IsValid() {
			inner.ServeHTTP(w, r)
			return
		}
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		inner.ServeHTTP(rec, r)
		out := p.rewriteHTTPBody(rec.body.Bytes(), idKey(req.ID))
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.status)
		_, _ = w.Write(out)
	})
}

// rewriteHTTPBody rewrites the tools/list response of id in an HTTP body:
// a JSON-RPC message, or server-sent events whose data lines are.
func (p *Proxy) rewriteHTTPBody(body []byte, id string) []byte {
	rewrite := func(data []byte) []byte {
		msg, err := jsonrpc.DecodeMessage(data)
		r, ok := msg.(*jsonrpc.Response)
		if err != nil || !ok || !r.ID.IsValid() || idKey(r.ID) != id || r.Error != nil {
			return data
		}
		cp := *r
		cp.Result = p.rewriteTools(r.Result)
		out, err := jsonrpc.EncodeMessage(&cp)
		if err != nil {
			return data
		}
		return out
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		return rewrite(t)
	}
	var b bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			b.WriteString("data: ")
			b.Write(rewrite(d))
		} else {
			b.Write(line)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// bufferedResponse holds a response until the handler is done.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Flush()                      {}
