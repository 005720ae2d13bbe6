package mcpproxy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/mcpproxy"
)

// Tests against MCP servers written by others, from npm (testdata/npm).

const filesPolicy = `{"budget": 20, "tools": {
  "read_text_file": {"cost": 1},
  "list_allowed_directories": {"cost": 0},
  "write_file": {"cost": 2, "requires_approval": true}}}`

// filesystem is @modelcontextprotocol/server-filesystem on a fresh directory.
func filesystem(t *testing.T) (*mcp.CommandTransport, string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &mcp.CommandTransport{Command: npmServer(t, "mcp-server-filesystem", dir), TerminateDuration: 300 * time.Millisecond}, dir
}

func TestFilesystemReadAndHidden(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(filesPolicy)
	up, dir := filesystem(t)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello from disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := svc.connect(t, tok, up, proxyOpts{})
	got := h.toolNames(t)
	slices.Sort(got)
	if want := []string{"list_allowed_directories", "read_text_file", "write_file"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}

	// An allowed read, answered by the real server.
	res := h.call(t, "read_text_file", map[string]any{"path": filepath.Join(dir, "notes.txt")})
	if res.IsError || !strings.Contains(text(res), "hello from disk") {
		t.Fatalf("read: isError %v: %q", res.IsError, text(res))
	}

	// A tool left out of the policy is hidden, and calling it scars.
	target := filepath.Join(dir, "notes.txt")
	res = h.call(t, "edit_file", map[string]any{"path": target,
		"edits": []any{map[string]any{"oldText": "hello", "newText": "pwned"}}})
	v := verdictOf(t, res)
	if !res.IsError || v.Decision != lineage.Deny || v.Reason != "unlisted_tool" || v.Scar == nil || v.Scar.Severity != lineage.Moderate {
		t.Fatalf("edit_file: isError %v, verdict %+v: %q", res.IsError, v, text(res))
	}
	for _, want := range []string{`"edit_file"`, "unlisted_tool", "moderate scar", "19 of 20 credits left", "may go on"} {
		if !strings.Contains(text(res), want) {
			t.Errorf("the denial %q does not say %q", text(res), want)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "hello from disk\n" {
		t.Errorf("the hidden tool changed the file: %q", b)
	}
	st := svc.state(agent)
	if st.ScarScore != 3 || st.Spent != 1 {
		t.Errorf("state: scar score %d, spent %d; want 3, 1", st.ScarScore, st.Spent)
	}
}

// A write that needs approval waits (with progress), is approved by an
// approver through the service, and then really writes the file, exactly once,
// even with two identical calls waiting on it.
func TestFilesystemApprovedWriteOnce(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(filesPolicy)
	up, dir := filesystem(t)
	h := svc.connect(t, tok, up, proxyOpts{wait: 30 * time.Second})
	target := filepath.Join(dir, "out.txt")
	args := map[string]any{"path": target, "content": "approved\n"}

	results := make([]*mcp.CallToolResult, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &mcp.CallToolParams{Name: "write_file", Arguments: args,
				Meta: mcp.Meta{"progressToken": fmt.Sprintf("tok-%d", i)}}
			res, err := h.CallTool(context.Background(), p)
			if err != nil {
				t.Errorf("write_file: %v", err)
				return
			}
			results[i] = res
		}()
	}
	id := svc.pendingOf(t, agent, nil)
	waiting := func() map[any]bool { // a waiting call has sent its first progress
		m := map[any]bool{}
		for _, p := range h.progress() {
			m[p.ProgressToken] = strings.Contains(p.Message, id)
		}
		return m
	}
	for deadline := time.Now().Add(20 * time.Second); len(waiting()) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the two calls are not both waiting: %v", waiting())
		}
	}
	if w := waiting(); !w["tok-0"] || !w["tok-1"] {
		t.Fatalf("progress of the waiting calls: %v", w)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the file exists before the approval: %v", err)
	}
	if len(svc.state(agent).Pending) != 1 {
		t.Fatalf("pending = %v: the same call made a second request", svc.state(agent).Pending)
	}
	if _, err := svc.approver.Approve(context.Background(), agent, id); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var written, refused int
	for _, res := range results {
		switch {
		case !res.IsError:
			written++
		case refusalOf(res) == mcpproxy.ReasonAlreadyForwarded:
			refused++
		default:
			t.Errorf("unexpected result: %q %v", text(res), res.Meta)
		}
	}
	if written != 1 || refused != 1 {
		t.Fatalf("%d forwarded, %d refused as already forwarded; want 1, 1", written, refused)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "approved\n" {
		t.Fatalf("the file: %q, %v", b, err)
	}
	// The same call again is a new call: a new request, not a second forward.
	if err := os.WriteFile(target, []byte("changed since\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h2 := svc.connect(t, tok, func() mcp.Transport { u, _ := filesystemAt(t, dir); return u }(), proxyOpts{wait: 100 * time.Millisecond})
	res := h2.call(t, "write_file", args)
	if v := verdictOf(t, res); !res.IsError || v.Decision != lineage.Pending || v.RequestID == id {
		t.Fatalf("the same write again: %+v %q", v, text(res))
	}
	if b, _ := os.ReadFile(target); string(b) != "changed since\n" {
		t.Errorf("the approved write was forwarded twice: %q", b)
	}
}

// filesystemAt is the filesystem server on an existing directory.
func filesystemAt(t *testing.T, dir string) (*mcp.CommandTransport, string) {
	return &mcp.CommandTransport{Command: npmServer(t, "mcp-server-filesystem", dir), TerminateDuration: 300 * time.Millisecond}, dir
}

// A call still pending when the wait ends says so; approved while the proxy
// is down, the same call after a restart (same state directory) forwards it,
// once.
func TestFilesystemApprovalAcrossRestart(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(filesPolicy)
	up, dir := filesystem(t)
	state := t.TempDir()
	target := filepath.Join(dir, "later.txt")
	args := map[string]any{"path": target, "content": "later\n"}

	h := svc.connect(t, tok, up, proxyOpts{wait: 200 * time.Millisecond, stateDir: state})
	res := h.call(t, "write_file", args)
	v := verdictOf(t, res)
	if !res.IsError || v.Decision != lineage.Pending || !strings.Contains(text(res), v.RequestID) {
		t.Fatalf("write_file: %+v %q", v, text(res))
	}
	again := h.call(t, "write_file", args)
	if v2 := verdictOf(t, again); v2.RequestID != v.RequestID {
		t.Fatalf("the same call made request %s, not continued %s", v2.RequestID, v.RequestID)
	}
	h.close()
	if _, err := svc.approver.Approve(context.Background(), agent, v.RequestID); err != nil {
		t.Fatal(err)
	}
	up2, _ := filesystemAt(t, dir)
	h = svc.connect(t, tok, up2, proxyOpts{wait: 200 * time.Millisecond, stateDir: state})
	if res := h.call(t, "write_file", args); res.IsError {
		t.Fatalf("the approved call after the restart: %q", text(res))
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "later\n" {
		t.Fatalf("the file: %q, %v", b, err)
	}
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	res = h.call(t, "write_file", args)
	if v3 := verdictOf(t, res); v3.Decision != lineage.Pending || v3.RequestID == v.RequestID {
		t.Fatalf("after forwarding, the same call: %+v %q", v3, text(res))
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the approved request was forwarded twice")
	}
}

// A rejected write never writes.
func TestFilesystemRejectedNeverWrites(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(filesPolicy)
	up, dir := filesystem(t)
	h := svc.connect(t, tok, up, proxyOpts{wait: 30 * time.Second})
	target := filepath.Join(dir, "no.txt")
	done := h.callAsync(t, "write_file", map[string]any{"path": target, "content": "no\n"})
	id := svc.pendingOf(t, agent, nil)
	if _, err := svc.approver.Reject(context.Background(), agent, id); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res == nil {
		return
	}
	v := verdictOf(t, res)
	if !res.IsError || v.Reason != "approval_rejected" || !strings.Contains(text(res), "rejected") {
		t.Fatalf("rejected write: %+v %q", v, text(res))
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("a rejected write wrote: %v", err)
	}
}

// The agent terminated mid-session: every call is refused, a waiting one too.
func TestFilesystemTerminatedMidSession(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(filesPolicy)
	up, dir := filesystem(t)
	h := svc.connect(t, tok, up, proxyOpts{wait: 30 * time.Second})
	if res := h.call(t, "list_allowed_directories", nil); res.IsError || !strings.Contains(text(res), dir) {
		t.Fatalf("list_allowed_directories: %q", text(res))
	}
	target := filepath.Join(dir, "x.txt")
	done := h.callAsync(t, "write_file", map[string]any{"path": target, "content": "x"})
	svc.pendingOf(t, agent, nil)
	if _, err := svc.admin.Terminate(context.Background(), agent, "test"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res == nil || !res.IsError || verdictOf(t, res).Reason != "terminated" {
		t.Fatalf("the waiting write after the kill: %+v", res)
	}
	for _, name := range []string{"list_allowed_directories", "read_text_file", "write_file"} {
		res := h.call(t, name, map[string]any{"path": target, "content": "x"})
		if v := verdictOf(t, res); !res.IsError || v.Reason != "terminated" || !strings.Contains(text(res), "terminated") {
			t.Errorf("%s after the kill: %+v %q", name, v, text(res))
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a call of a terminated agent wrote")
	}
	// The guard said terminated: the host is shown no tools any more (D244: a terminated agent's proxy lists nothing).
	if got := h.toolNames(t); len(got) != 0 {
		t.Errorf("tools after the kill = %v, want none", got)
	}
}

const everythingPolicy = `{"budget": 100, "scar_limit": 5, "tools": {
  "echo": {"cost": 1},
  "get-sum": {"cost": 1, "when": [{"expr": "args.a + args.b <= 100", "reason": "sum_too_big", "scar": "minor"}]},
  "trigger-long-running-operation": {"cost": 1}}}`

// @modelcontextprotocol/server-everything: allowed calls, a CEL denial, the
// upstream's progress passed to the host, and the scar limit terminating.
func TestEverything(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(everythingPolicy)
	h := svc.connect(t, tok, &mcp.CommandTransport{Command: npmServer(t, "mcp-server-everything"), TerminateDuration: 300 * time.Millisecond}, proxyOpts{})
	got := h.toolNames(t)
	slices.Sort(got)
	if want := []string{"echo", "get-sum", "trigger-long-running-operation"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	if res := h.call(t, "echo", map[string]any{"message": "hi there"}); res.IsError || !strings.Contains(text(res), "hi there") {
		t.Fatalf("echo: %q", text(res))
	}
	if res := h.call(t, "get-sum", map[string]any{"a": 2, "b": 3}); res.IsError || !strings.Contains(text(res), "5") {
		t.Fatalf("get-sum: %q", text(res))
	}
	res := h.call(t, "get-sum", map[string]any{"a": 99, "b": 3})
	if v := verdictOf(t, res); !res.IsError || v.Reason != "sum_too_big" || v.Scar == nil || v.Scar.Severity != lineage.Minor {
		t.Fatalf("get-sum over the limit: %+v %q", v, text(res))
	}

	res, err := h.CallTool(context.Background(), &mcp.CallToolParams{Name: "trigger-long-running-operation",
		Arguments: map[string]any{"duration": 1, "steps": 3}, Meta: mcp.Meta{"progressToken": "long-1"}})
	if err != nil || res.IsError {
		t.Fatalf("long operation: %v %q", err, text(res))
	}
	prog := h.progress()
	for deadline := time.Now().Add(5 * time.Second); len(prog) < 3 && time.Now().Before(deadline); prog = h.progress() {
		time.Sleep(10 * time.Millisecond) // notifications may come after the result
	}
	if len(prog) != 3 || prog[2].ProgressToken != "long-1" || prog[2].Progress != 3 {
		t.Errorf("the upstream's progress, as the host got it: %d notifications %+v", len(prog), prog)
	}

	// Unlisted tools, 3 points each: the second reaches the scar limit (1+3+3 ≥ 5).
	h.call(t, "get-env", nil)
	res = h.call(t, "get-tiny-image", nil)
	if v := verdictOf(t, res); v.Terminated != lineage.ScarLimitReached || !strings.Contains(text(res), "now terminated") {
		t.Fatalf("the scar that terminates: %+v %q", v, text(res))
	}
	if st := svc.state(agent); st.Status != lineage.Terminated {
		t.Errorf("status %s", st.Status)
	}
	if res := h.call(t, "echo", map[string]any{"message": "still?"}); verdictOf(t, res).Reason != "terminated" {
		t.Errorf("echo after termination: %q", text(res))
	}
}
