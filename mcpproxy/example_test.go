package mcpproxy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage/compiler"
)

// The example of examples/mcp works as written: its host config runs
// `lineagec mcp` over the filesystem server of the version the tests pin, and
// every pin of its policy holds for that server, so the proxy shows every
// listed tool (a stale pin would hide one).
func TestExampleAsWritten(t *testing.T) {
	raw, err := os.ReadFile("../examples/mcp/host-config.jsonc")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("host-config.jsonc is not JSON: %v", err)
	}
	files := cfg.MCPServers["files"]
	dash := slices.Index(files.Args, "--")
	if files.Command != "lineagec" || len(files.Args) == 0 || files.Args[0] != "mcp" || dash < 0 || files.Env["LINEAGE_TOKEN"] == "" {
		t.Fatalf("the host config does not run lineagec mcp with a token: %+v", files)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile("testdata/npm/package.json")
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		t.Fatalf("testdata/npm/package.json: %v", err)
	}
	want := "@modelcontextprotocol/server-filesystem@" + pkg.Dependencies["@modelcontextprotocol/server-filesystem"]
	if up := files.Args[dash+1:]; len(up) < 3 || up[0] != "npx" || !slices.Contains(up, want) {
		t.Fatalf("the upstream %v is not npx %s", up, want)
	}

	src, err := os.ReadFile("../examples/mcp/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := compiler.Compile("policy.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	svc := startService(t)
	_, tok := svc.agent(string(c.Document))
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	h := svc.connect(t, tok, &mcp.CommandTransport{Command: npmServer(t, "mcp-server-filesystem", dir),
		TerminateDuration: 300 * time.Millisecond}, proxyOpts{})
	var listed []string
	for name, rule := range c.Policy.Tools {
		if rule.Pin == "" {
			t.Errorf("the example leaves %s unpinned", name)
		}
		listed = append(listed, name)
	}
	got := h.toolNames(t)
	slices.Sort(got)
	slices.Sort(listed)
	if !slices.Equal(got, listed) {
		t.Fatalf("the proxy shows %v, the policy lists %v (a pin that does not hold hides its tool): %s", got, listed, h.stderr.String())
	}
	if strings.Contains(h.stderr.String(), "differs") {
		t.Errorf("stderr: %s", h.stderr.String())
	}
}
