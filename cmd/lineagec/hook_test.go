package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/server/servertest"
)

// hookPolicy is a coding agent's policy for the hook tests.
const hookPolicy = `{"budget": 1000, "scar_limit": 100, "tools": {
  "Bash": {"cost": 1},
  "Write": {"cost": 1, "when": [{"expr": "!args.file_path.contains('/.git/')", "reason": "git_internals", "scar": "severe"}]},
  "mcp__server__tool": {"cost": 2},
  "mcp__ci__deploy": {"cost": 5, "requires_approval": true}}}`

// hookEnv is a guard service, an agent under hookPolicy and the hook as a
// process: this test binary under the name lineagec (TestMain).
type hookEnv struct {
	t        testing.TB
	svc      *servertest.Service
	agent    string
	token    string
	bin      string
	stateDir string
	approver *client.Client
	admin    *client.Client
}

func newHookEnv(t testing.TB, policy string) *hookEnv {
	t.Helper()
	svc := servertest.Start(t)
	admin, _ := client.New(svc.URL, svc.AdminToken, nil)
	approver, _ := client.New(svc.URL, svc.ApproverToken, nil)
	c, err := admin.CreateAgent(context.Background(), json.RawMessage(policy), "claude", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "lineagec")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	return &hookEnv{t: t, svc: svc, agent: c.Agent, token: c.Token, bin: bin,
		stateDir: filepath.Join(dir, "state"), approver: approver, admin: admin}
}

// run runs `lineagec hook claude-code` with the event on stdin; the hook must
// exit 0 and answer one JSON object.
func (e *hookEnv) run(event string, args ...string) (map[string]any, string) {
	e.t.Helper()
	args = append([]string{"hook", "claude-code", "--state-dir", e.stateDir}, args...)
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "LINEAGE_SERVER="+e.svc.URL, "LINEAGE_TOKEN="+e.token)
	cmd.Stdin = strings.NewReader(event)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("the hook must exit 0: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		e.t.Fatalf("the hook's answer is not one JSON object: %v: %q", err, stdout.String())
	}
	if testing.Verbose() {
		e.t.Logf("event:  %s\nanswer: %s", strings.TrimSpace(event), strings.TrimSpace(stdout.String()))
	}
	return out, stdout.String()
}

// preToolUse is the event Claude Code sends before a tool call.
func preToolUse(tool string, input any) string {
	in, _ := json.Marshal(input)
	return fmt.Sprintf(`{"session_id":"s-1","transcript_path":"/tmp/t.jsonl","cwd":"/work/proj","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":%q,"tool_input":%s,"tool_use_id":"toolu_%d"}`,
		tool, in, time.Now().UnixNano())
}

// deny returns the answer's deny reason, failing unless it is a deny.
func deny(t testing.TB, out map[string]any) string {
	t.Helper()
	h, ok := out["hookSpecificOutput"].(map[string]any)
	if !ok || h["hookEventName"] != "PreToolUse" || h["permissionDecision"] != "deny" {
		t.Fatalf("want a PreToolUse deny, got %v", out)
	}
	r, _ := h["permissionDecisionReason"].(string)
	if r == "" {
		t.Fatalf("a deny without a reason: %v", out)
	}
	return r
}

func allowed(t testing.TB, out map[string]any) {
	t.Helper()
	if len(out) != 0 {
		t.Fatalf("want {} (allowed, no decision of the hook's own), got %v", out)
	}
}

func TestHookClaudeCode(t *testing.T) {
	e := newHookEnv(t, hookPolicy)
	ctx := context.Background()

	t.Run("allow", func(t *testing.T) {
		out, _ := e.run(preToolUse("Bash", map[string]any{"command": "go test ./...", "description": "run the tests"}))
		allowed(t, out)
		out, _ = e.run(preToolUse("Write", map[string]any{"file_path": "/work/proj/main.go", "content": "package main\n"}))
		allowed(t, out)
		out, _ = e.run(preToolUse("mcp__server__tool", map[string]any{"q": 1.5}))
		allowed(t, out)
		out, _ = e.run(preToolUse("Bash", map[string]any{"command": "ls"}), "--allow-skips-prompt")
		if h, _ := out["hookSpecificOutput"].(map[string]any); h == nil || h["permissionDecision"] != "allow" {
			t.Fatalf("--allow-skips-prompt: want permissionDecision allow, got %v", out)
		}
		st, err := e.admin.State(ctx, e.agent)
		if err != nil {
			t.Fatal(err)
		}
		if st.Spent != 5 || st.Calls["Bash"] != 2 || st.Calls["Write"] != 1 || st.Calls["mcp__server__tool"] != 1 {
			t.Fatalf("state after the allowed calls: spent %d, calls %v", st.Spent, st.Calls)
		}
	})

	t.Run("deny", func(t *testing.T) {
		out, _ := e.run(preToolUse("Write", map[string]any{"file_path": "/work/proj/.git/config", "content": "x"}))
		r := deny(t, out)
		// The same text the MCP proxy gives a model.
		want := `lineage denied the call to "Write" (reason: git_internals); it left a severe scar (weight 10); 995 of 1000 credits left; the agent may go on.`
		if r != want {
			t.Fatalf("deny text\n got: %s\nwant: %s", r, want)
		}
		out, _ = e.run(preToolUse("NotebookEdit", map[string]any{"notebook_path": "/work/proj/a.ipynb"}))
		if r := deny(t, out); !strings.HasPrefix(r, `lineage denied the call to "NotebookEdit" (reason: unlisted_tool; the tool is not in the agent's policy`) {
			t.Fatalf("unknown tool: %s", r)
		}
	})

	t.Run("pending then approved within the wait", func(t *testing.T) {
		done := make(chan map[string]any, 1)
		go func() {
			out, _ := e.run(preToolUse("mcp__ci__deploy", map[string]any{"env": "staging"}), "--approval-wait", "30s")
			done <- out
		}()
		id := e.awaitPending(t, `"staging"`)
		if _, err := e.approver.Approve(ctx, e.agent, id); err != nil {
			t.Fatal(err)
		}
		select {
		case out := <-done:
			allowed(t, out)
		case <-time.After(20 * time.Second):
			t.Fatal("the hook did not answer once the call was approved")
		}
	})

	t.Run("pending past the wait continues the same request", func(t *testing.T) {
		ev := preToolUse("mcp__ci__deploy", map[string]any{"env": "prod", "ref": "v1"})
		start := time.Now()
		out, _ := e.run(ev, "--approval-wait", "1s")
		if d := time.Since(start); d < time.Second {
			t.Fatalf("answered after %v, before the approval wait", d)
		}
		r := deny(t, out)
		m := regexp.MustCompile(`approve request (cc-[0-9a-f]{16}-[0-9a-f]{16})`).FindStringSubmatch(r)
		if m == nil || !strings.Contains(r, "continues that request") {
			t.Fatalf("the still-pending deny must name the request and say the same call continues it: %s", r)
		}
		id := m[1]
		// The same call again (another tool_use_id, keys in another order):
		// the same request, still pending.
		again := strings.Replace(ev, `"tool_use_id":"`, `"tool_use_id":"x`, 1)
		again = strings.Replace(again, `{"env":"prod","ref":"v1"}`, `{"ref":"v1", "env":"prod"}`, 1)
		if again == ev {
			t.Fatal("the repeated event is the same text")
		}
		out, _ = e.run(again, "--approval-wait", "200ms")
		if r := deny(t, out); !strings.Contains(r, id) {
			t.Fatalf("the same call made a new request: %s", r)
		}
		if _, err := e.approver.Approve(ctx, e.agent, id); err != nil {
			t.Fatal(err)
		}
		out, _ = e.run(ev, "--approval-wait", "1s")
		allowed(t, out)
		if n := e.records(t, id); n != 2 { // the request and its approval
			t.Fatalf("request %s: %d records, want 2 (one request, one approval)", id, n)
		}
		// Used once: the same call again is a new request.
		out, _ = e.run(ev, "--approval-wait", "100ms")
		if r := deny(t, out); strings.Contains(r, id) || !strings.Contains(r, "approve request cc-") {
			t.Fatalf("an approved request was used twice: %s", r)
		}
	})

	t.Run("fail closed", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := "http://" + ln.Addr().String()
		ln.Close()
		ev := preToolUse("Bash", map[string]any{"command": "ls"})
		out, _ := e.run(ev, "--server", down)
		if r := deny(t, out); !strings.Contains(r, "could not get a decision") {
			t.Fatalf("guard down: %s", r)
		}
		out, _ = e.run(ev, "--token", "lga_AAAA")
		deny(t, out)
		for _, bad := range []string{"", "not json", `{"tool_name":"Bash","tool_input":{}}`, `{"hook_event_name":"PreToolUse","tool_input":{}}`,
			`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":[1]}`, `[]`,
			// D371 (the hook's event read strictly): a name twice, a name in
			// other capitals, invalid Unicode are not an event.
			`{"hook_event_name":"PreToolUse","tool_name":"Read","tool_name":"Bash","tool_input":{"command":"ls"}}`,
			`{"Hook_Event_Name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}`,
			`{"hook_event_name":"PreToolUse","tool_name":"Bash\ud800","tool_input":{"command":"ls"}}`} {
			out, _ = e.run(bad)
			deny(t, out)
		}
		for _, misuse := range [][]string{{"--approval-wait", "banana"}, {"--data", t.TempDir()}, {"extra-arg"}, {"--no-such-flag"}} {
			out, _ = e.run(ev, misuse...)
			if r := deny(t, out); !strings.Contains(r, "misconfigured") {
				t.Fatalf("%q: %s", misuse, r)
			}
		}
		out, _ = e.run(preToolUse("bad tool name!", map[string]any{}))
		if r := deny(t, out); !strings.Contains(r, "malformed") {
			t.Fatalf("malformed request: %s", r)
		}
	})

	t.Run("other events", func(t *testing.T) {
		out, _ := e.run(`{"session_id":"s-1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{}}`)
		allowed(t, out)
		out, _ = e.run(`{"session_id":"s-1","hook_event_name":"UserPromptSubmit","prompt":"hi"}`)
		allowed(t, out)
	})

	t.Run("settings", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"hook", "claude-code", "--settings", "--server", "http://127.0.0.1:8181"}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var doc struct {
			Hooks map[string][]struct {
				Matcher string `json:"matcher"`
				Hooks   []struct {
					Type, Command string
					Timeout       int
				} `json:"hooks"`
			} `json:"hooks"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		pre := doc.Hooks["PreToolUse"]
		if len(pre) != 1 || pre[0].Matcher != "*" || len(pre[0].Hooks) != 1 || pre[0].Hooks[0].Type != "command" ||
			pre[0].Hooks[0].Command != "lineagec hook claude-code --server http://127.0.0.1:8181" || pre[0].Hooks[0].Timeout <= 50 {
			t.Fatalf("settings fragment: %s", stdout.String())
		}
		if code := run([]string{"hook", "claude-code", "--settings", "--token", "x"}, &stdout, &stderr); code != 1 {
			t.Fatalf("--settings with --token: exit %d, want 1 (a token is never written into settings)", code)
		}
	})
}

// awaitPending returns the id of the agent's pending request whose args hold
// text, once there is one.
func (e *hookEnv) awaitPending(t *testing.T, text string) string {
	t.Helper()
	for i := 0; i < 400; i++ {
		p, err := e.approver.Pending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p {
			a, _ := json.Marshal(r.Args)
			if r.Agent == e.agent && strings.Contains(string(a), text) {
				return r.RequestID
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no pending request with %s", text)
	return ""
}

// records counts the agent's log records that mention id.
func (e *hookEnv) records(t *testing.T, id string) int {
	t.Helper()
	log, err := e.admin.Log(context.Background(), e.agent, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range bytes.Split(log, []byte("\n")) {
		if bytes.Contains(line, []byte(`"`+id+`"`)) {
			t.Logf("%s", line)
			n++
		}
	}
	return n
}

// BenchmarkHookClaudeCode measures one hook run as Claude Code makes it:
// process start, the event on stdin, the exchange with a real service on a
// loopback port, the answer on stdout (an allowed Bash call). p50 and p99 are
// reported as metrics.
func BenchmarkHookClaudeCode(b *testing.B) {
	e := newHookEnv(b, `{"budget": 0, "tools": {"Bash": {"cost": 0}}}`)
	ev := preToolUse("Bash", map[string]any{"command": "go test ./...", "description": "run the tests"})
	env := append(os.Environ(), "LINEAGE_SERVER="+e.svc.URL, "LINEAGE_TOKEN="+e.token)
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(e.bin, "hook", "claude-code", "--state-dir", e.stateDir)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(ev)
		start := time.Now()
		out, err := cmd.Output()
		times = append(times, time.Since(start))
		if err != nil || strings.TrimSpace(string(out)) != "{}" {
			b.Fatalf("hook: %v %q", err, out)
		}
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[(len(times)*99)/100].Microseconds())/1000, "p99-ms")
}

// TestHookClaudeCodeExample: examples/claude-code works as written. Its .claude/
// settings.json is what --settings prints, its case file repeats policy.yaml
// (the same digest), and the hook, given the example's policy, allows a shell
// command, denies a write under .git and holds a git push for a person.
func TestHookClaudeCodeExample(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "claude-code")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"hook", "claude-code", "--settings"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--settings: exit %d: %s", code, stderr.String())
	}
	settings, err := os.ReadFile(filepath.Join(dir, ".claude", "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(settings, stdout.Bytes()) {
		t.Fatalf("examples/claude-code/.claude/settings.json is not what --settings prints:\n%s", stdout.String())
	}
	pol, err := compiler.CompileFile(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "claude-code.cases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		Policy map[string]any `yaml:"policy"`
	}
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(cases.Policy)
	inCases, err := compiler.Compile("claude-code.cases.yaml", doc)
	if err != nil {
		t.Fatal(err)
	}
	if inCases.Digest != pol.Digest {
		t.Fatalf("the case file's policy (%s) is not policy.yaml (%s): copy it again", inCases.Digest, pol.Digest)
	}
	e := newHookEnv(t, string(pol.Document))
	out, _ := e.run(preToolUse("Bash", map[string]any{"command": "go vet ./...", "description": "vet"}))
	allowed(t, out)
	out, _ = e.run(preToolUse("Bash", map[string]any{"command": "git push origin main"}), "--approval-wait", "100ms")
	if r := deny(t, out); !strings.Contains(r, "a person must approve request cc-") {
		t.Fatalf("git push: %s", r)
	}
	out, _ = e.run(preToolUse("Write", map[string]any{"file_path": "/home/dev/project/.git/config", "content": "x"}))
	if r := deny(t, out); !strings.Contains(r, "reason: git_internals") || !strings.Contains(r, "terminated (scar_limit_reached)") {
		t.Fatalf("write under .git: %s", r)
	}
}
