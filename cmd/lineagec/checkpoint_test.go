package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/rogpeppe/go-internal/txtar"

	"github.com/lineage-guard/lineage/checkpoint/checkpointtest"
)

// lineagec runs the command in-process and returns its exit status and stdout.
func lineagec(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := run(args, &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("lineagec %s: %s", strings.Join(args, " "), stderr.String())
	}
	return code, stdout.String()
}

// TestRehashedLogFailsVerifyCheckpoint is the case: someone who can
// write the folder edits the policy record (a bigger budget, its digest
// recomputed) and re-hashes the whole chain. verify alone says ok; verify
// against a checkpoint kept elsewhere fails and names seq 1.
func TestRehashedLogFailsVerifyCheckpoint(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("budget: 3\ntools: { pay: { cost: 1 } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := lineagec(t, "--data", data, "agent", "create", "--policy", policy)
	if code != 0 {
		t.Fatalf("agent create: %d", code)
	}
	agent := strings.TrimSpace(out)
	for i := 0; i < 2; i++ {
		if code, _ := lineagec(t, "--data", data, "request", agent, "pay"); code != 0 {
			t.Fatalf("request: %d", code)
		}
	}
	key, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	cp, note := filepath.Join(dir, "cp"), filepath.Join(dir, "note")
	for _, args := range [][]string{
		{"key", "generate", "--private", key, "--public", pub},
		{"--data", data, "checkpoint", agent, "--key", key, "-o", cp},
		{"--data", data, "checkpoint", agent, "--key", key, "-o", note, "--note-only"},
	} {
		if code, _ := lineagec(t, args...); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
	}

	raw, err := os.ReadFile(filepath.Join(data, agent+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	forged, err := checkpointtest.Rehash(lines, 1, func(body []byte) []byte {
		var b struct {
			Digest string         `json:"digest"`
			Policy map[string]any `json:"policy"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		b.Policy["budget"] = 1000
		doc, _ := json.Marshal(b.Policy)
		doc, err := jcs.Transform(doc)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(doc)
		b.Digest = "sha256:" + hex.EncodeToString(sum[:])
		out, _ := json.Marshal(b)
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "forged.jsonl")
	if err := os.WriteFile(file, append(bytes.Join(forged, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(bytes.Join(forged, nil), bytes.Join(lines, nil)) {
		t.Fatal("the forgery changed nothing")
	}
	// The chain alone cannot tell.
	if code, out := lineagec(t, "verify", file); code != 0 || !strings.HasPrefix(out, "ok: 4 records") {
		t.Fatalf("verify without a checkpoint: exit %d, %q", code, out)
	}
	// The checkpoint can, and names the policy record.
	code, out = lineagec(t, "verify", file, "--checkpoint", cp, "--pubkey", pub)
	if code != exitFailure || !strings.HasPrefix(out, "diverges at seq 1: record 1 is not the one the checkpoint signed") {
		t.Fatalf("verify --checkpoint: exit %d, %q", code, out)
	}
	// The bare note proves the rewrite but cannot place it.
	code, out = lineagec(t, "verify", file, "--checkpoint", note, "--pubkey", pub)
	if code != exitFailure || !strings.HasPrefix(out, "diverges at seq 0..3: the log's first 4 records do not match the checkpoint's root") {
		t.Fatalf("verify --checkpoint with the note alone: exit %d, %q", code, out)
	}
	// The original still passes.
	if code, out := lineagec(t, "--data", data, "verify", agent, "--checkpoint", cp, "--pubkey", pub); code != 0 {
		t.Fatalf("the original: exit %d, %q", code, out)
	}
}

// TestReplayScriptUsesTheExample keeps replay.txtar's invoice policy the
// example's own.
func TestReplayScriptUsesTheExample(t *testing.T) {
	a, err := txtar.ParseFile("testdata/script/replay.txtar")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../examples/invoice/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range a.Files {
		if f.Name == "invoice.yaml" {
			if !bytes.Equal(f.Data, want) {
				t.Fatal("replay.txtar's invoice.yaml is not examples/invoice/policy.yaml; copy it again")
			}
			return
		}
	}
	t.Fatal("replay.txtar has no invoice.yaml")
}

// TestProvableHistoryBadInput: malformed keys, checkpoints, logs and
// policies end with exit 1 and a message, never a panic.
func TestProvableHistoryBadInput(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	policy := filepath.Join(dir, "p.yaml")
	garbage := filepath.Join(dir, "garbage")
	empty := filepath.Join(dir, "empty")
	for name, text := range map[string]string{policy: "budget: 1\ntools: {}\n", garbage: "\x00\xff{\n\n— x\n", empty: ""} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out := lineagec(t, "--data", data, "agent", "create", "--policy", policy)
	if code != 0 {
		t.Fatal(code)
	}
	agent := strings.TrimSpace(out)
	key, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	if code, _ := lineagec(t, "key", "generate", "--private", key, "--public", pub); code != 0 {
		t.Fatal(code)
	}
	for _, args := range [][]string{
		{"key", "generate", "--private", dir, "--public", filepath.Join(dir, "x.pub")},
		{"key", "generate", "--private", filepath.Join(dir, "same"), "--public", filepath.Join(dir, "same")},
		{"key", "generate", "--name", "", "--private", filepath.Join(dir, "n.key"), "--public", filepath.Join(dir, "n.pub")},
		{"key", "generate", "extra"},
		{"checkpoint", agent, "--key", garbage},
		{"checkpoint", agent, "--key", empty},
		{"checkpoint", agent, "--key", filepath.Join(dir, "missing")},
		{"checkpoint", garbage, "--key", key},
		{"checkpoint", empty, "--key", key},
		{"checkpoint", agent, "--key", key, "-o", dir},
		{"verify", agent, "--checkpoint", garbage, "--pubkey", pub},
		{"verify", agent, "--checkpoint", empty, "--pubkey", pub},
		{"verify", agent, "--checkpoint", pub, "--pubkey", pub},
		{"verify", agent, "--checkpoint", garbage, "--pubkey", garbage},
		{"verify", agent, "--checkpoint", garbage, "--pubkey", key},
		{"replay", agent, "--policy", garbage},
		{"replay", garbage, "--policy", policy},
		{"replay", empty, "--policy", policy},
		{"replay", agent, "--policy", dir},
	} {
		var stdout, stderr strings.Builder
		code := run(append([]string{"--data", data}, args...), &stdout, &stderr)
		said := stdout.String() + stderr.String()
		if code != exitFailure || said == "" || strings.Contains(said, "internal error") ||
			(stderr.Len() > 0 && !strings.HasPrefix(stderr.String(), "lineagec: ")) {
			t.Errorf("lineagec %q: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}
