package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/client"
)

// TestServeSignsCheckpoints: `serve --checkpoint-key` serves checkpoints;
// `checkpoint AGENT --server URL` prints the server's note, which opens with
// the public key and passes `verify --checkpoint` on the log file.
func TestServeSignsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	if code, _ := lineagec(t, "key", "generate", "--name", "guard", "--private", key, "--public", pub); code != 0 {
		t.Fatalf("key generate: %d", code)
	}
	data := filepath.Join(dir, "data")
	_, url, stderr, _ := startServe(t, data, "--checkpoint-key", key)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := client.New(url, strings.TrimSpace(string(tok)), nil)
	ctx := context.Background()
	created, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 10, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := admin.Request(ctx, created.Agent, lineage.Request{Tool: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("LINEAGE_SERVER", "")
	t.Setenv("LINEAGE_TOKEN", created.Token) // the agent's own checkpoint
	note := filepath.Join(dir, "note")
	if code, _ := lineagec(t, "checkpoint", created.Agent, "--server", url, "-o", note); code != 0 {
		t.Fatalf("checkpoint --server: %d\n%s", code, stderr())
	}
	if code, _ := lineagec(t, "checkpoint", created.Agent, "--server", url, "--key", key); code == 0 {
		t.Error("checkpoint --server --key: exit 0, want --key refused")
	}
	msg, err := os.ReadFile(note)
	if err != nil {
		t.Fatal(err)
	}
	vkey, _ := os.ReadFile(pub)
	v, err := checkpoint.NewVerifier(string(vkey))
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Open(msg, v)
	if err != nil || c.Agent != created.Agent || c.Size != 5 {
		t.Fatalf("the served note: %+v %v\n%s", c, err, msg)
	}
	// The same key over the same log signs the same bytes (Ed25519 is deterministic).
	code, local := lineagec(t, "checkpoint", filepath.Join(data, created.Agent+".jsonl"), "--key", key, "--note-only")
	if code != 0 || local != string(msg) {
		t.Errorf("checkpoint --note-only of the log file: %d\n%s\nwant the served note:\n%s", code, local, msg)
	}
	code, out := lineagec(t, "verify", filepath.Join(data, created.Agent+".jsonl"), "--checkpoint", note, "--pubkey", pub)
	if code != 0 || !strings.HasPrefix(out, "ok: 5 records") {
		t.Errorf("verify --checkpoint with the server's note: %d %q", code, out)
	}
}
