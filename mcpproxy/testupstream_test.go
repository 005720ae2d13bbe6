package mcpproxy_test

import (
	"context"
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
