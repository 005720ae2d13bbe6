package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

// TestServeTwoNodes: two `lineagec serve --store postgres://…` processes on
// one database, sharing the keys of one folder: an agent made on one is
// decided on both, a retry on the other node answers the first node's
// verdict, and a read on either sees both (docs/stores.md).
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

// TestServeKillNode: kill -9 of one of two nodes under load: the other goes
// on, every verdict either node answered is in the log, and the log
// verifies (docs/stores.md).
func TestServeKillNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and two servers")
	}
	url := pgtest.URL(t)
	data := t.TempDir()
	cmd1, u1, _, wait1 := startServe(t, data, "--store", url)
	_, u2, _, _ := startServe(t, data, "--store", url)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin, _ := client.New(u2, strings.TrimSpace(string(tok)), nil)
	cr, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 1000000, "tools": {"t": {"cost": 1}}}`), "bot", "")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		got     = map[string]uint64{} // request id → seq of its answered verdict
		after   int                   // answers of node 2 after the kill
		killed  bool
		wg      sync.WaitGroup
		stopped = make(chan struct{})
	)
	for w := range 8 {
		u := []string{u1, u2}[w%2]
		bot, _ := client.New(u, cr.Token, nil)
		bot.Retries = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopped:
					return
				default:
				}
				id := fmt.Sprintf("w%d_%d", w, i)
				v, err := bot.Request(ctx, cr.Agent, lineage.Request{ID: id, Tool: "t"})
				if err != nil {
					if u == u2 {
						t.Errorf("node 2: %s: %v", id, err)
					}
					return // node 1 went away: that request was never acknowledged
				}
				mu.Lock()
				got[id] = v.Seq
				if killed && u == u2 {
					after++
				}
				mu.Unlock()
			}
		}()
	}
	waitFor := func(what string, ok func() bool) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			done := ok()
			mu.Unlock()
			if done {
				return
			}
			if time.Now().After(deadline) {
				close(stopped)
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("50 verdicts", func() bool { return len(got) >= 50 })
	if err := cmd1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	killed = true
	mu.Unlock()
	_ = wait1()
	waitFor("50 verdicts of node 2 after the kill", func() bool { return after >= 50 })
	close(stopped)
	wg.Wait()

	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := runtime.Open(st, runtime.Options{})
	recs, err := rt.Records(cr.Agent)
	if err != nil {
		t.Fatalf("the log does not verify after kill -9 of a node: %v", err)
	}
	for id, seq := range got {
		var b lineage.ActionBody
		if seq >= uint64(len(recs)) || recs[seq].Kind != lineage.KindAction || json.Unmarshal(recs[seq].Body, &b) != nil || b.Request.ID != id {
			t.Fatalf("%s was answered at seq %d, which the log (%d records) does not hold", id, seq, len(recs))
		}
	}
}
