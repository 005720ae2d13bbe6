package mcpproxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tests' own upstream: this test binary, re-executed with
// LINEAGE_MCP_TEST_UPSTREAM=<echo's description>, serves MCP on stdio with
// the SDK. Each echo call is appended to $LINEAGE_MCP_TEST_LOG, so a test can
// tell what reached the upstream.
const (
	upstreamEnv    = "LINEAGE_MCP_TEST_UPSTREAM"
	upstreamLogEnv = "LINEAGE_MCP_TEST_LOG"
)

type echoArgs struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

// newTestUpstream is the tests' upstream server: echo (described by desc),
// fail (an isError result), grow (adds the tool late: tools/list_changed).
func newTestUpstream(desc, logPath string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test-upstream", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: desc},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			if logPath != "" {
				f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return nil, nil, err
				}
				fmt.Fprintln(f, a.Text)
				f.Close()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "always fails"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "upstream failure"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "grow", Description: "adds the tool late"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "late", Description: "added by grow"},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
				})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "grown"}}}, nil, nil
		})
	return s
}

func runTestUpstream() int {
	s := newTestUpstream(os.Getenv(upstreamEnv), os.Getenv(upstreamLogEnv))
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test upstream:", err)
		return 1
	}
	return 0
}

// testUpstream is the command of the tests' own upstream as a subprocess.
func testUpstream(t testing.TB, desc, logPath string) *mcp.CommandTransport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe, "-test.run=^$")
	c.Env = append(os.Environ(), upstreamEnv+"="+desc, upstreamLogEnv+"="+logPath)
	c.Stderr = testWriter{t}
	return &mcp.CommandTransport{Command: c}
}

// rawUpstreamEnv makes the test binary a bare JSON-RPC MCP server on stdio
// whose tools/list answers with the JSON array in that file, read anew on
// each list, exactly as written: members the SDK's Tool does not know
// included. Each tools/call appends its arguments, as received, to
// $LINEAGE_MCP_TEST_LOG; a call of the tool "relist" is preceded by
// notifications/tools/list_changed.
const rawUpstreamEnv = "LINEAGE_MCP_TEST_RAW_TOOLS"

func runRawUpstream(toolsPath, logPath string) int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 64<<10), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	reply := func(id json.RawMessage, result any, rpcErr any) {
		msg := map[string]any{"jsonrpc": "2.0", "id": id}
		if rpcErr != nil {
			msg["error"] = rpcErr
		} else {
			msg["result"] = result
		}
		b, _ := json.Marshal(msg)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string          `json:"protocolVersion"`
				Name            string          `json:"name"`
				Arguments       json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || len(req.ID) == 0 {
			continue // a notification
		}
		switch req.Method {
		case "initialize":
			reply(req.ID, map[string]any{"protocolVersion": req.Params.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{"listChanged": true}},
				"serverInfo":   map[string]any{"name": "raw-upstream", "version": "1"}}, nil)
		case "ping":
			reply(req.ID, map[string]any{}, nil)
		case "tools/list":
			tools, err := os.ReadFile(toolsPath)
			if err != nil {
				reply(req.ID, nil, map[string]any{"code": -32603, "message": err.Error()})
				continue
			}
			reply(req.ID, map[string]any{"tools": json.RawMessage(tools)}, nil)
		case "tools/call":
			if req.Params.Name == "relist" { // the tools file changed: say so
				out.WriteString(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n")
			}
			if f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintf(f, "%s\n", req.Params.Arguments)
				f.Close()
			}
			reply(req.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": "ok"}},
				"structuredContent": map[string]any{}}, nil)
		default:
			reply(req.ID, nil, map[string]any{"code": -32601, "message": "method not found"})
		}
	}
	return 0
}

// rawUpstream is the command of the bare upstream serving the tools in toolsPath.
func rawUpstream(t testing.TB, toolsPath, logPath string) *mcp.CommandTransport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe, "-test.run=^$")
	c.Env = append(os.Environ(), rawUpstreamEnv+"="+toolsPath, upstreamLogEnv+"="+logPath)
	c.Stderr = testWriter{t}
	return &mcp.CommandTransport{Command: c}
}
