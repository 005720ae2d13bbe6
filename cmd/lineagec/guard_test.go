package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestGuardsAnswerAlike runs each agent command with the same input on the
// local store and against a server (guard.go: the local runtime and the Go
// client behind one interface): stdout, stderr and the exit status must be
// the same, once what differs by construction is masked (the agent id, the
// hashes, which cover the times, and the times). Where they differ by design
// (--by locally, the token's principal remotely; the token a server shows
// once) the test says so.
func TestGuardsAnswerAlike(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`budget: 10
tools:
  pay: { cost: 1, when: [{expr: "args.amount <= 100", reason: too_much, scar: minor}] }
  wire: { cost: 2, requires_approval: true }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	u, tok, stop, err := serveInProcess(filepath.Join(dir, "srv"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	t.Setenv("LINEAGE_SERVER", "")
	t.Setenv("LINEAGE_TOKEN", tok)
	t.Setenv("LINEAGE_STORE", "")
	local := []string{"--data", filepath.Join(dir, "data")}
	remote := []string{"--server", u}
	mask := func(b []byte) string {
		for _, m := range []struct{ re, with string }{
			{`agt_[a-z2-7]{26}`, "AGENT"},
			{`sha256:[0-9a-f]{64}`, "HASH"},
			{`sha256:[0-9a-f]{12}…`, "DIGEST"},
			{`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`, "TIME"},
			{`lga_[A-Za-z0-9_-]+`, "TOKEN"},
		} {
			b = regexp.MustCompile(m.re).ReplaceAll(b, []byte(m.with))
		}
		return string(b)
	}
	type result struct {
		code           int
		stdout, stderr string
	}
	exec := func(mode []string, args ...string) result {
		var out, errb bytes.Buffer
		code := run(append(append([]string{}, mode...), args...), &out, &errb)
		return result{code, mask(out.Bytes()), mask(errb.Bytes())}
	}
	// agent create: the id on stdout either way; a server also shows the
	// agent's token, once, on stderr.
	created := map[bool]string{}
	for _, remoteMode := range []bool{false, true} {
		mode := local
		if remoteMode {
			mode = remote
		}
		var out, errb bytes.Buffer
		if code := run(append(append([]string{}, mode...), "agent", "create", "--policy", policy, "--name", "bot"), &out, &errb); code != 0 {
			t.Fatalf("agent create (remote %v): exit %d\n%s", remoteMode, code, errb.String())
		}
		created[remoteMode] = string(bytes.TrimSpace(out.Bytes()))
	}
	steps := [][]string{
		{"request", "A", "pay", "--args", `{"amount": 5}`, "--id", "r1"},
		{"request", "A", "pay", "--args", `{"amount": 500}`, "--id", "r2"},
		{"request", "A", "wire", "--id", "w1", "--args", `{"to": "x"}`},
		{"request", "A", "wire", "--id", "w2"},
		{"request", "A", "wire", "--id", "w1"},
		{"request", "A", "pya", "--id", "u1"},
		{"request", "agt_nobody", "pay"},
		{"pending"},
		{"pending", "--format", "json"},
		{"pending", "--limit", "1"},
		{"approve", "A", "w1", "BY"},
		{"reject", "A", "w2", "BY", "--note", "not now"},
		{"reject", "A", "w2", "BY"},
		{"state", "A"},
		{"agent", "list"},
		{"agent", "list", "--format", "table"},
		{"agent", "list", "--format", "json"},
		{"log", "A"},
		{"log", "A", "--format", "table"},
		{"verify", "A"},
		{"verify", "A", "--format", "json"},
		{"terminate", "A", "BY", "--reason", "done"},
		{"terminate", "A", "BY"},
		{"state", "A"},
	}
	for _, step := range steps {
		args := map[bool][]string{}
		for _, remoteMode := range []bool{false, true} {
			for _, a := range step {
				switch {
				case a == "A":
					args[remoteMode] = append(args[remoteMode], created[remoteMode])
				case a == "BY" && remoteMode: // the token names the approver
				case a == "BY":
					args[remoteMode] = append(args[remoteMode], "--by", "ops")
				default:
					args[remoteMode] = append(args[remoteMode], a)
				}
			}
		}
		l, r := exec(local, args[false]...), exec(remote, args[true]...)
		if len(step) > 1 && step[1] == "agt_nobody" {
			// An unknown agent: locally the words name the data
			// directory, remotely they are the server's.
			l.stderr, r.stderr = "", ""
		}
		if l != r {
			t.Errorf("%v: local and remote differ\nlocal  (exit %d):\n%s%s\nremote (exit %d):\n%s%s", step, l.code, l.stdout, l.stderr, r.code, r.stdout, r.stderr)
		}
	}
}
