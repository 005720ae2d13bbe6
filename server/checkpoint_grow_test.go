package server_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"golang.org/x/mod/sumdb/note"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/checkpoint/checkpointtest"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// startGrowing is a signing server whose checkpoints come at most once per
// interval, over a runtime that holds at most maxAgents agents (0: no bound).
func startGrowing(t *testing.T, interval time.Duration, maxAgents int) (*env, note.Verifier) {
	t.Helper()
	edit, verifier := checkpointKeys(t)
	logs := &syncBuffer{}
	svc := servertest.Start(t,
		servertest.WithRuntime(func(o *runtime.Options) { o.MaxAgents = maxAgents }),
		servertest.WithConfig(func(cfg *server.Config) {
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			cfg.CheckpointInterval = interval
			edit(cfg)
		}))
	t.Cleanup(svc.Server.Close)
	e := &env{t: t, url: svc.URL, dir: svc.Dir, srv: svc.Server, logs: logs, store: svc.File, hs: svc.HTTP, svc: svc,
		tokens: map[string]string{"admin": svc.AdminToken, "approver": svc.ApproverToken}}
	e.admin = e.client(svc.AdminToken)
	e.approver = e.client(svc.ApproverToken)
	return e, verifier
}

// wire sends n requests that stay pending (one record each).
func wire(t *testing.T, e *env, agent string, n int) {
	t.Helper()
	for range n {
		v, err := e.admin.Request(bg, agent, lineage.Request{Tool: "wire"})
		if err != nil || v.Decision != lineage.Pending {
			t.Fatalf("request: %+v %v", v, err)
		}
	}
}

// metric reads one sample of the server's /metrics.
func (e *env) metric(name string) float64 {
	e.t.Helper()
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		e.t.Fatalf("no metric %s in\n%s", name, b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// TestCheckpointsSignedAsTheLogGrows: with no GET at all, the server signs a
// checkpoint that covers the new records shortly after they are written (D200: signed as logs grow).
func TestCheckpointsSignedAsTheLogGrows(t *testing.T) {
	e, verifier := startGrowing(t, 0, 0)
	agent, bot := e.agent()
	pay(t, bot, agent, 5)
	want := uint64(e.lines(agent))
	deadline := time.Now().Add(10 * time.Second)
	var c checkpoint.Checkpoint
	for {
		if msg := e.srv.LatestCheckpoint(agent); msg != nil {
			var err error
			if c, err = checkpoint.Open(msg, verifier); err != nil {
				t.Fatal(err)
			}
			if c.Size == want {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of the %d records after 10 s (latest: %d)", want, c.Size)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res := checkpoint.Verify(served(t, e.admin, agent), c, nil); !res.OK {
		t.Fatalf("the log does not match the checkpoint signed as it grew: %+v", res)
	}
	if e.srv.LatestCheckpoint("agt_nobody") != nil {
		t.Error("a checkpoint of an agent that does not exist")
	}
}

// TestCheckpointsCoalesce: appends within the interval are signed together,
// and a GET asks for what it needs at once (D202: coalesced, D203 (a GET waits for what was acknowledged before it)).
func TestCheckpointsCoalesce(t *testing.T) {
	e, verifier := startGrowing(t, time.Hour, 0)
	agent, _ := e.agent()
	wire(t, e, agent, 20)
	msg, err := e.admin.Checkpoint(bg, agent)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Open(msg, verifier)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 22 || c.Size != uint64(e.lines(agent)) {
		t.Fatalf("the GET after 20 requests serves a checkpoint of %d records, the log has %d", c.Size, e.lines(agent))
	}
	if n := e.metric("lineage_checkpoint_ranges"); n != 1 {
		t.Errorf("%v Merkle states in memory, want the one agent's", n)
	}
	if n := e.metric("lineage_checkpoints_signed_total"); n < 1 || n > 2 {
		t.Errorf("%v signatures for 22 records written within the interval: want 1 or 2 (the agent's first, the GET's)", n)
	}
	p, err := e.admin.Proof(bg, agent, 21)
	if err != nil {
		t.Fatal(err)
	}
	verifyProof(t, p, served(t, e.admin, agent)[21], c)
}

// forgeRecord rewrites record k of the agent's log file and re-hashes the
// chain after it; the forged log verifies as a chain.
func forgeRecord(t *testing.T, e *env, agent string, k int) {
	t.Helper()
	e.svc.DamageExpected = true // the store's Close reports the rewrite
	file := filepath.Join(e.dir, agent+".jsonl")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'})
	forged, err := checkpointtest.Rehash(lines, k, func(body []byte) []byte {
		return bytes.Replace(body, []byte(`"amount":1`), []byte(`"amount":7`), 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := append(bytes.Join(forged, []byte{'\n'}), '\n')
	if len(out) != len(b) || bytes.Equal(out, b) {
		t.Fatalf("the forgery must change the log and keep its length")
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.VerifyLines(func(fn func(uint64, []byte) error) error {
		for i, l := range forged {
			if err := fn(uint64(i), l); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the forged log should verify as a chain, else the test proves nothing: %v", err)
	}
}

// TestProofRefusesARewrittenOldRecord: a record under the latest checkpoint
// rewritten and re-hashed on disk is caught by the next proof, which builds
// the tree from the stored hashes and compares its root with the signed one,
// without verifying the old records strictly again (D204: a proof from the stored hashes, D152 (a log must extend the server's last checkpoint)).
func TestProofRefusesARewrittenOldRecord(t *testing.T) {
	e, verifier := startGrowing(t, time.Hour, 0)
	agent, bot := e.agent()
	pay(t, bot, agent, 3)
	msg, err := e.admin.Checkpoint(bg, agent)
	if err != nil {
		t.Fatal(err)
	}
	c := open1(t, msg, verifier)
	if _, err := e.admin.Proof(bg, agent, 3); err != nil {
		t.Fatalf("a proof of the intact log: %v", err)
	}
	forgeRecord(t, e, agent, 3)
	for _, p := range []string{"/proof/0", "/proof/4?size=" + strconv.FormatUint(c.Size, 10)} {
		status, body := e.raw("GET", "/v1/agents/"+agent+p, e.tokens["admin"], "")
		if status != http.StatusInternalServerError || body["code"] != api.CodeCheckpointDiverged {
			t.Errorf("%s of a log rewritten under its checkpoint: %d %v", p, status, body)
		}
	}
}

// TestRewriteWhileUnloadedIsCaught: an agent that left the runtime's memory
// leaves its Merkle state too (D205: memory); rebuilt from the stored hashes when its
// log grows again, it must match the last checkpoint, so a rewrite made
// meanwhile is named, not signed (D152: a log must extend the server's last checkpoint).
func TestRewriteWhileUnloadedIsCaught(t *testing.T) {
	e, verifier := startGrowing(t, time.Hour, 1)
	agent, bot := e.agent()
	pay(t, bot, agent, 3)
	if _, err := e.admin.Checkpoint(bg, agent); err != nil {
		t.Fatal(err)
	}
	other, _ := e.agent() // the runtime holds one agent: the first leaves
	wire(t, e, other, 1)
	forgeRecord(t, e, agent, 3)
	pay(t, bot, agent, 1) // loads the forged log again and appends
	for _, p := range []string{"/checkpoint", "/proof/0"} {
		status, body := e.raw("GET", "/v1/agents/"+agent+p, e.tokens["admin"], "")
		if status != http.StatusInternalServerError || body["code"] != api.CodeCheckpointDiverged {
			t.Errorf("%s of a log rewritten while unloaded: %d %v", p, status, body)
		}
	}
	// The other agent, untouched, is still signed.
	msg, err := e.admin.Checkpoint(bg, other)
	if err != nil {
		t.Fatal(err)
	}
	if c := open1(t, msg, verifier); c.Size != 3 {
		t.Errorf("the other agent's checkpoint has %d records, want 3", c.Size)
	}
}

// TestCheckpointRangesFollowTheRuntime: Merkle states are kept only for the
// agents the runtime holds, however many grow (D205: memory).
func TestCheckpointRangesFollowTheRuntime(t *testing.T) {
	e, verifier := startGrowing(t, 0, 2)
	var agents []string
	for range 6 {
		agent, _ := e.agent()
		wire(t, e, agent, 2)
		agents = append(agents, agent)
	}
	for _, agent := range agents {
		msg, err := e.admin.Checkpoint(bg, agent)
		if err != nil {
			t.Fatal(err)
		}
		if c := open1(t, msg, verifier); c.Size != 4 {
			t.Errorf("agent %s: checkpoint of %d records, want 4", agent, c.Size)
		}
	}
	// Which two are loaded varies; never more than two have a state.
	deadline := time.Now().Add(10 * time.Second)
	for n := e.metric("lineage_checkpoint_ranges"); n > 2; n = e.metric("lineage_checkpoint_ranges") {
		if time.Now().After(deadline) {
			t.Fatalf("%v Merkle states in memory for a runtime that holds 2 agents", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func open1(t *testing.T, msg []byte, v note.Verifier) checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.Open(msg, v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
