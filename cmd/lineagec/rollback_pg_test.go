package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

// TestServeSharedMark: on a shared PostgreSQL store the size and head of the
// last checkpoint signed are the nodes' common memory: a node started later
// signs the same checkpoint of the same log, and a fresh node that finds the
// log shorter than a mark some node kept (here: a mark of 8 records where the
// database holds 6, as a database restored from an older backup than the
// mark would) refuses to sign or prove it and verify says checkpoint_diverged
// (D254 (the signed size shared by the nodes)).
func TestServeSharedMark(t *testing.T) {
	url := pgtest.URL(t)
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	if code, _ := lineagec(t, "key", "generate", "--name", "guard", "--private", key, "--public", pub); code != 0 {
		t.Fatalf("key generate: %d", code)
	}
	vkey, _ := os.ReadFile(pub)
	v, err := checkpoint.NewVerifier(string(vkey))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	signed := func(c *client.Client, agent string) checkpoint.Checkpoint {
		t.Helper()
		note, err := c.Checkpoint(ctx, agent)
		if err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		cp, err := checkpoint.Open(note, v)
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	_, a := serveNode(t, "--store", url, "--checkpoint-key", key)
	created, err := a.CreateAgent(ctx, json.RawMessage(`{"budget": 100, "tools": {"pay": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := a.Request(ctx, created.Agent, lineage.Request{Tool: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	first := signed(a, created.Agent)
	if first.Size != 6 {
		t.Fatalf("checkpoint of %d records, want 6", first.Size)
	}
	_, b := serveNode(t, "--store", url, "--checkpoint-key", key)
	if c := signed(b, created.Agent); c.Size != 6 || c.Head != first.Head {
		t.Fatalf("another node's checkpoint: %d %s, want 6 %s", c.Size, c.Head, first.Head)
	}
	pgtest.Exec(t, url, `UPDATE lineage_checkpoints SET size = 8, head = 'sha256:' || repeat('d', 64) WHERE agent = '`+created.Agent+`'`)
	_, c := serveNode(t, "--store", url, "--checkpoint-key", key)
	var ce *api.Error
	if _, err := c.Checkpoint(ctx, created.Agent); !errors.As(err, &ce) || ce.Code != "checkpoint_diverged" {
		t.Fatalf("a fresh node's checkpoint of 6 records under a mark of 8: %v, want checkpoint_diverged", err)
	}
	if _, err := c.Proof(ctx, created.Agent, 0); !errors.As(err, &ce) || ce.Code != "checkpoint_diverged" {
		t.Errorf("proof: %v, want checkpoint_diverged", err)
	}
	res, err := c.Verify(ctx, created.Agent)
	if err != nil || res.OK || res.Seq == nil || *res.Seq != 6 || !strings.Contains(res.Message, "checkpoint_diverged") {
		t.Errorf("verify: %+v %v, want not ok at seq 6, checkpoint_diverged", res, err)
	}
}
