package mcpproxy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/mcpproxy"
)

// A host on the official TypeScript SDK with its default options (a 60 s
// request timeout, no reset on progress) sees the "waits for approval"
// answer for an unapproved call: the proxy's default --approval-wait (50 s)
// ends first (docs/mcp.md, D245 (an approval wait under the hosts' timeout)).
// It runs at the default wait, about 50 s: -short skips it.
func TestTSClientDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("about 50 s at the default approval wait; runs without -short")
	}
	if mcpproxy.DefaultApprovalWait >= 60*time.Second {
		t.Fatalf("DefaultApprovalWait = %v: not under the TypeScript SDK's 60 s request timeout", mcpproxy.DefaultApprovalWait)
	}
	npmServer(t, "mcp-server-everything") // skips (fails under CI) without the npm install and node
	script, err := filepath.Abs(filepath.Join("testdata", "npm", "tsclient.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("testdata", "npm", "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		msg := "@modelcontextprotocol/sdk is not installed: run npm ci --prefix mcpproxy/testdata/npm --no-audit --no-fund"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	svc := startService(t)
	agent, tok := svc.agent(`{"budget": 10, "tools": {"echo": {"cost": 1, "requires_approval": true}}}`)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The proxy: this test binary in the role BenchmarkToolsCall uses, with
	// the tests' upstream in memory and no ApprovalWait (the default).
	c := exec.Command("node", script, "echo", `{"text":"hi"}`, exe, "-test.run=^$")
	c.Env = append(os.Environ(), benchRoleEnv+"=proxy", benchGuardEnv+"="+svc.url, benchTokenEnv+"="+tok,
		benchStateEnv+"="+t.TempDir())
	c.Stderr = testWriter{t}
	start := time.Now()
	out, err := c.Output()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the TypeScript host: %v\n%s", err, out)
	}
	var res struct {
		OK     bool   `json:"ok"`
		MS     int64  `json:"ms"`
		Code   any    `json:"code"`
		Error  string `json:"error"`
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("the TypeScript host printed %q: %v", out, err)
	}
	if !res.OK {
		t.Fatalf("the TypeScript host's call failed after %d ms (code %v): %s", res.MS, res.Code, res.Error)
	}
	if !res.Result.IsError || len(res.Result.Content) != 1 || !strings.Contains(res.Result.Content[0].Text, "waits for a person's approval") {
		t.Fatalf("the TypeScript host got %+v, not the waiting answer", res.Result)
	}
	t.Logf("the waiting answer reached the TypeScript host after %d ms (the whole run %v)", res.MS, took.Round(time.Millisecond))
	if pending := svc.pendingOf(t, agent, nil); pending == "" {
		t.Error("no pending request")
	}
}
