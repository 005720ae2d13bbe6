package mcpproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/mcpproxy"
	"github.com/lineage-guard/lineage/server/servertest"
)

// TestMain makes the test binary an MCP server of the tests' own when
// LINEAGE_MCP_TEST_UPSTREAM is set (testupstream_test.go), or one of
// BenchmarkToolsCall's processes when LINEAGE_MCP_BENCH_ROLE is
// (bench_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv(rawUpstreamEnv); path != "" {
		os.Exit(runRawUpstream(path, os.Getenv(upstreamLogEnv)))
	}
	if os.Getenv(upstreamEnv) != "" {
		os.Exit(runTestUpstream())
	}
	if role := os.Getenv(benchRoleEnv); role != "" {
		os.Exit(runBenchRole(role))
	}
	os.Exit(m.Run())
}

// service is a real guard service on a free loopback port over a file store.
type service struct {
	t        testing.TB
	url      string
	admin    *client.Client
	approver *client.Client
	hs       *http.Server
}

func startService(t testing.TB) *service {
	t.Helper()
	svc := servertest.Start(t)
	s := &service{t: t, url: svc.URL, hs: svc.HTTP}
	s.admin = s.client(svc.AdminToken)
	s.approver = s.client(svc.ApproverToken)
	return s
}

// stop shuts the service down (the proxy's guard is then unreachable).
func (s *service) stop() {
	srv := s.hs
	srv.SetKeepAlivesEnabled(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.t.Errorf("shutdown: %v", err)
	}
}

func (s *service) client(token string) *client.Client {
	c, err := client.New(s.url, token, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// agent creates an agent under a policy (JSON) and returns its id and token.
func (s *service) agent(policyJSON string) (string, string) {
	s.t.Helper()
	c, err := s.admin.CreateAgent(context.Background(), json.RawMessage(policyJSON), "mcp-bot", "")
	if err != nil {
		s.t.Fatalf("creating the agent: %v", err)
	}
	return c.Agent, c.Token
}

func (s *service) state(agent string) lineage.State {
	s.t.Helper()
	st, err := s.admin.State(context.Background(), agent)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// npmServer returns the command of an MCP server installed from npm in
// testdata/npm. Outside CI a missing install skips the test; under CI=true
// it fails it.
func npmServer(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", "npm", "node_modules", ".bin", bin))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("%s is not installed (%v): run npm ci --prefix mcpproxy/testdata/npm --no-audit --no-fund", bin, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	c := exec.Command(path, args...)
	c.Stderr = testWriter{t}
	return c
}

// testWriter passes an upstream's stderr to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("upstream: %s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// syncBuffer is the proxy's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// host is the Go SDK's own client connected to a proxy, as a host would be.
type host struct {
	*mcp.ClientSession
	proxy   *mcpproxy.Proxy
	stderr  *syncBuffer
	mu      sync.Mutex
	prog    []*mcp.ProgressNotificationParams
	changes int
}

type proxyOpts struct {
	wait     time.Duration
	stateDir string
}

// connect starts a proxy for the agent's token over upstream and connects a host to it.
func (s *service) connect(t testing.TB, token string, upstream mcp.Transport, o proxyOpts) *host {
	t.Helper()
	if o.stateDir == "" {
		o.stateDir = t.TempDir()
	}
	ctx := context.Background()
	h := &host{stderr: &syncBuffer{}}
	p, err := mcpproxy.New(ctx, mcpproxy.Config{Guard: s.client(token), Upstream: upstream,
		ApprovalWait: o.wait, StateDir: o.stateDir, Stderr: h.stderr})
	if err != nil {
		t.Fatalf("starting the proxy: %v", err)
	}
	h.proxy = p
	st, ct := mcp.NewInMemoryTransports()
	ss, err := p.Connect(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			h.mu.Lock()
			h.prog = append(h.prog, r.Params)
			h.mu.Unlock()
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			h.mu.Lock()
			h.changes++
			h.mu.Unlock()
		},
	})
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.ClientSession = cs
	t.Cleanup(func() { h.close() })
	_ = ss
	return h
}

func (h *host) close() {
	h.ClientSession.Close()
	h.proxy.Close()
}

func (h *host) progress() []*mcp.ProgressNotificationParams {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*mcp.ProgressNotificationParams(nil), h.prog...)
}

// toolNames lists the tools the host sees.
func (h *host) toolNames(t testing.TB) []string {
	t.Helper()
	res, err := h.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// call calls a tool; a JSON-RPC error fails the test.
func (h *host) call(t testing.TB, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := h.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: a JSON-RPC error: %v", name, err)
	}
	return res
}

// callAsync calls a tool in the background; the channel gets its result
// (nil after a JSON-RPC error, which fails the test).
func (h *host) callAsync(t testing.TB, name string, args map[string]any) <-chan *mcp.CallToolResult {
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := h.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Errorf("tools/call %s: %v", name, err)
		}
		done <- res
	}()
	return done
}

// text is the text of a result's contents.
func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// verdictOf is the _meta["lineage/verdict"] of a result ("" reason if none).
func verdictOf(t testing.TB, res *mcp.CallToolResult) lineage.Verdict {
	t.Helper()
	var v lineage.Verdict
	m, ok := res.Meta[mcpproxy.MetaVerdict]
	if !ok {
		return v
	}
	raw, _ := json.Marshal(m)
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("_meta[%q] is not a verdict: %s", mcpproxy.MetaVerdict, raw)
	}
	return v
}

// refusalOf is the reason of _meta["lineage/refusal"], or "".
func refusalOf(res *mcp.CallToolResult) string {
	m, _ := res.Meta[mcpproxy.MetaRefusal].(map[string]any)
	r, _ := m["reason"].(string)
	return r
}

// pendingOf waits until the agent has a pending request and returns its id.
func (s *service) pendingOf(t testing.TB, agent string, not map[string]bool) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for id := range s.state(agent).Pending {
			if !not[id] {
				return id
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no pending request appeared")
	return ""
}
