package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/internal/pgtest"
)

// TestServeTwoNodes: two `lineagec serve --store postgres://…` processes on
// one database, sharing the keys of one folder: an agent made on one is
// decided on both, a retry on the other node answers the first node's
// verdict, and a read on either sees both (SPEC §12).
func TestServeTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and two servers")
	}
	url := pgtest.URL(t)
	data := t.TempDir()
	_, u1, _, _ := startServe(t, data, "--store", url, "--max-agents", "2")
	_, u2, _, _ := startServe(t, data, "--store", url)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin, err := client.New(u1, strings.TrimSpace(string(tok)), nil)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 10, "tools": {"t": {"cost": 1}}}`), "bot", "")
	if err != nil {
		t.Fatal(err)
	}
	on := func(u string) *client.Client {
		c, err := client.New(u, cr.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	n1, n2 := on(u1), on(u2)
	v1, err := n1.Request(ctx, cr.Agent, lineage.Request{ID: "a", Tool: "t"})
	if err != nil || v1.Seq != 2 {
		t.Fatalf("node 1: %+v, %v", v1, err)
	}
	if v, err := n2.Request(ctx, cr.Agent, lineage.Request{ID: "b", Tool: "t"}); err != nil || v.Seq != 3 {
		t.Fatalf("node 2: %+v, %v; want seq 3", v, err)
	}
	if v, err := n2.Request(ctx, cr.Agent, lineage.Request{ID: "a", Tool: "t"}); err != nil || v.Seq != v1.Seq || v.Decision != v1.Decision {
		t.Fatalf("node 2: retry of node 1's request: %+v, %v; want %+v", v, err, v1)
	}
	for i, c := range []*client.Client{n1, n2} {
		st, err := c.State(ctx, cr.Agent)
		if err != nil || st.Seq != 3 || st.Spent != 2 {
			t.Fatalf("node %d: seq %d spent %d, %v; want 3 and 2", i+1, st.Seq, st.Spent, err)
		}
	}
}

// TestServeRefusesNegativeBounds: --max-agents and --agent-idle below zero
// are refused before anything starts.
func TestServeRefusesNegativeBounds(t *testing.T) {
	for _, args := range [][]string{{"--max-agents", "-1"}, {"--agent-idle", "-1s"}} {
		var out, errb strings.Builder
		code := run(append([]string{"serve", "--data", t.TempDir()}, args...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "must not be negative") {
			t.Errorf("serve %v: exit %d, stderr %q; want a refusal", args, code, errb.String())
		}
	}
}
