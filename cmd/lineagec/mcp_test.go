package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
)

// filesystemServer is the npm filesystem MCP server the mcpproxy tests
// install; outside CI its absence skips, under CI=true it fails.
func filesystemServer(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("../../mcpproxy/testdata/npm/node_modules/.bin/mcp-server-filesystem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		msg := "the npm MCP servers are not installed: run npm ci --prefix mcpproxy/testdata/npm --no-audit --no-fund"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// mcpSetup starts a service with an agent under policy and returns the
// service's URL, the agent, and this test binary under the name lineagec.
func mcpSetup(t *testing.T, policy string) (string, api.Created, string) {
	t.Helper()
	url, adminTok, stop, err := serveInProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	admin, _ := client.New(url, adminTok, nil)
	created, err := admin.CreateAgent(context.Background(), json.RawMessage(policy), "", "")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "lineagec")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	return url, created, bin
}

// `lineagec mcp` as a host starts it: a subprocess whose stdout carries
// nothing but MCP (the SDK's client reads it), with the real filesystem
// server upstream; and `lineagec mcp pins` prints a fragment with every tool.
func TestMCPCommand(t *testing.T) {
	fs := filesystemServer(t)
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"mcp", "pins", "--", fs, dir}, &out, &errb); code != exitOK {
		t.Fatalf("mcp pins: exit %d: %s", code, errb.String())
	}
	// A tool not annotated read-only is printed to need approval (D243 (pins
	// printed to need approval)): pasted as is, nothing writes for free.
	pins := regexp.MustCompile(`(?m)^  "([a-z_]+)":\n    cost: 0\n(    requires_approval: true # not annotated read-only\n)?    pin: "(sha256:[0-9a-f]{64})"$`).FindAllStringSubmatch(out.String(), -1)
	if !strings.HasPrefix(out.String(), "tools:\n") || len(pins) < 14 {
		t.Fatalf("mcp pins printed:\n%s", out.String())
	}
	// Each tool's inputSchema is its args_schema (D324 (pins print the
	// inputSchema)): the fragment compiles, and the real server's schemas
	// are used, not left as comments.
	pinned, err := compiler.Compile("pins.yaml", []byte("budget: 5\n"+out.String()))
	if err != nil {
		t.Fatalf("mcp pins printed a fragment that does not compile:\n%s\n%v", out.String(), err)
	}
	if pinned.Policy.Tools["read_text_file"].ArgsSchema == nil || pinned.Policy.Tools["write_file"].ArgsSchema == nil {
		t.Errorf("mcp pins printed no args_schema for read_text_file or write_file:\n%s", out.String())
	}
	var readPin string
	for _, m := range pins {
		if m[1] == "read_text_file" {
			readPin = m[3]
		}
		writes := m[1] == "write_file" || m[1] == "edit_file" || m[1] == "move_file" || m[1] == "create_directory"
		if approval := m[2] != ""; approval != writes {
			t.Errorf("mcp pins: %s printed with requires_approval %v", m[1], approval)
		}
	}

	ctx := context.Background()
	url, created, bin := mcpSetup(t, `{"budget": 5, "tools": {"read_text_file": {"cost": 1, "pin": "`+readPin+`"}}}`)
	cmd := exec.Command(bin, "mcp", "--server", url, "--state-dir", t.TempDir(), "--", fs, dir)
	cmd.Env = append(os.Environ(), "LINEAGE_TOKEN="+created.Token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
	if err != nil {
		t.Fatalf("connecting to lineagec mcp: %v\n%s", err, stderr.String())
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "read_text_file" {
		t.Fatalf("tools/list: %v %+v", err, tools)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": filepath.Join(dir, "a.txt")}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "alpha") {
		t.Fatalf("read_text_file: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": filepath.Join(dir, "b.txt"), "content": "x"}})
	if err != nil || !res.IsError {
		t.Fatalf("write_file: %v %+v", err, res)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.txt")); !os.IsNotExist(err) {
		t.Error("an unlisted write reached the server")
	}
	cs.Close()
	if !strings.Contains(stderr.String(), "Secure MCP Filesystem Server") {
		t.Errorf("the upstream's stderr was not passed through: %q", stderr.String())
	}
}

// `lineagec mcp --listen ADDR --upstream URL`: streamable HTTP on both sides.
func TestMCPOverHTTP(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	type echoArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "echo", Description: "echoes"},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	mcp.AddTool(up, &mcp.Tool{Name: "secret", Description: "not in the policy"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			t.Error("the hidden tool was forwarded")
			return &mcp.CallToolResult{}, nil, nil
		})
	upHTTP := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	defer upHTTP.Close()

	ctx := context.Background()
	url, created, bin := mcpSetup(t, `{"budget": 5, "tools": {"echo": {"cost": 1}}}`)
	cmd := exec.Command(bin, "mcp", "--server", url, "--token", created.Token, "--state-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--upstream", upHTTP.URL)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`serving MCP on (http://\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	var endpoint string
	select {
	case endpoint = <-urlc:
	case <-time.After(30 * time.Second):
		t.Fatal("lineagec mcp --listen did not start")
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "echo" {
		t.Fatalf("tools/list: %v %+v", err, tools)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over http"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "over http" {
		t.Fatalf("echo: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "secret"})
	if err != nil || !res.IsError || res.Meta["lineage/verdict"] == nil {
		t.Fatalf("secret: %v %+v", err, res)
	}
}
