package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/checkpoint/checkpointtest"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// rollbackRig is a real `lineagec serve --checkpoint-key` over a data
// directory, with an agent of 6 records (genesis, policy, 4 payments) and a
// signed checkpoint of 6: the reproduction "A rollback forgotten".
type rollbackRig struct {
	dir, data, key, pub string
	agent, head         string
	stop                func(sig syscall.Signal) string // ends serve, returns its stderr
	admin               *client.Client
}

func newRollbackRig(t *testing.T) *rollbackRig {
	t.Helper()
	g := &rollbackRig{dir: t.TempDir()}
	g.key, g.pub = filepath.Join(g.dir, "k"), filepath.Join(g.dir, "k.pub")
	if code, _ := lineagec(t, "key", "generate", "--name", "guard", "--private", g.key, "--public", g.pub); code != 0 {
		t.Fatalf("key generate: %d", code)
	}
	g.data = filepath.Join(g.dir, "data")
	g.start(t)
	ctx := context.Background()
	created, err := g.admin.CreateAgent(ctx, json.RawMessage(`{"budget": 100, "tools": {"pay": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	g.agent = created.Agent
	for range 4 {
		if _, err := g.admin.Request(ctx, g.agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	c := g.checkpoint(t)
	if c.Size != 6 {
		t.Fatalf("checkpoint of %d records, want 6", c.Size)
	}
	g.head = c.Head
	return g
}

// start runs serve over g.data and points g.admin at it.
func (g *rollbackRig) start(t *testing.T) {
	t.Helper()
	cmd, url, stderr, wait := startServe(t, g.data, "--checkpoint-key", g.key)
	tok, err := os.ReadFile(filepath.Join(g.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	g.admin, _ = client.New(url, strings.TrimSpace(string(tok)), nil)
	g.admin.Retries = 0
	g.stop = func(sig syscall.Signal) string {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		_ = wait()
		return stderr()
	}
}

// checkpoint asks serve for the agent's checkpoint and opens it.
func (g *rollbackRig) checkpoint(t *testing.T) checkpoint.Checkpoint {
	t.Helper()
	note, err := g.admin.Checkpoint(context.Background(), g.agent)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	vkey, _ := os.ReadFile(g.pub)
	v, err := checkpoint.NewVerifier(string(vkey))
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Open(note, v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (g *rollbackRig) logFile() string { return filepath.Join(g.data, g.agent+file.Ext) }

// cut keeps the log's first n records.
func (g *rollbackRig) cut(t *testing.T, n int) {
	t.Helper()
	b, err := os.ReadFile(g.logFile())
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte{'\n'})
	if err := os.Truncate(g.logFile(), int64(len(bytes.Join(lines[:n], nil)))); err != nil {
		t.Fatal(err)
	}
}

// edit rewrites payment record k (amount 1 → 7) and re-hashes the chain
// after it, in place: the forged log verifies as a chain, and has the
// length of the real one.
func (g *rollbackRig) edit(t *testing.T, k int) {
	t.Helper()
	b, err := os.ReadFile(g.logFile())
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
		t.Fatal("the forgery must change the log and keep its length")
	}
	f, err := os.OpenFile(g.logFile(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(out, 0); err != nil {
		t.Fatal(err)
	}
}

// TestServeRollbackRestored: the log of an agent with a signed checkpoint of
// 6 is cut back to 3 records (or a payment edited and the chain re-hashed)
// while serve runs; serve is stopped (SIGTERM, or kill -9) and started
// again: the agent's log has its 6 records again, verify says ok with the
// signed head, and the checkpoint is still 6 (D250 (a journal outlives a
// log that lost its records)).
func TestServeRollbackRestored(t *testing.T) {
	for _, damage := range []string{"cut", "edit"} {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(fmt.Sprintf("%s/%v", damage, sig), func(t *testing.T) {
				g := newRollbackRig(t)
				ctx := context.Background()
				if damage == "cut" {
					g.cut(t, 3)
					// Running, serve notices the file changed under the store.
					if v, err := g.admin.Verify(ctx, g.agent); err == nil && v.OK {
						t.Errorf("verify of the cut log while serve runs: %+v, want not ok", v)
					}
				} else {
					g.edit(t, 4)
				}
				stderr := g.stop(sig)
				if sig == syscall.SIGTERM && !strings.Contains(stderr, g.agent) {
					t.Errorf("serve stopped without naming the damaged agent %s:\n%s", g.agent, stderr)
				}
				g.start(t)
				defer g.stop(syscall.SIGTERM)
				v, err := g.admin.Verify(ctx, g.agent)
				if err != nil || !v.OK || v.Records == nil || *v.Records != 6 || v.Head != g.head {
					t.Fatalf("verify after restart: %+v %v, want ok with the 6 records of head %s", v, err, g.head)
				}
				if c := g.checkpoint(t); c.Size != 6 || c.Head != g.head {
					t.Fatalf("checkpoint after restart: %d records, head %s; want 6, %s", c.Size, c.Head, g.head)
				}
				if vd, err := g.admin.Request(ctx, g.agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": 1}}); err != nil || vd.Seq != 6 {
					t.Fatalf("a request after restart: %+v %v, want decided at seq 6", vd, err)
				}
			})
		}
	}
}

// TestServeRollbackRefusedAtMark: the reproduction with the journal
// destroyed too, so that no copy holds the records the log lost, and the
// store's note of the loss removed: after the
// restart, and after another, serve refuses to sign or prove the log of 3
// records and verify says checkpoint_diverged, naming record 3 (D252 (the
// signed size checked when an agent is met), D253 (the signed size kept in
// the data directory)).
func TestServeRollbackRefusedAtMark(t *testing.T) {
	g := newRollbackRig(t)
	g.cut(t, 3)
	g.stop(syscall.SIGTERM)
	// Every copy and the store's own note of the loss (D255 (a cut no copy
	// holds is noted at Close)) go: only the checkpoint mark is left.
	for _, name := range []string{file.JournalName, file.LostDir} {
		if err := os.RemoveAll(filepath.Join(g.data, name)); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		g.start(t)
		ctx := context.Background()
		_, err := g.admin.Checkpoint(ctx, g.agent)
		var ce *api.Error
		if !errors.As(err, &ce) || ce.Code != "checkpoint_diverged" {
			t.Fatalf("round %d: checkpoint of the log cut to 3: %v, want checkpoint_diverged", round, err)
		}
		if _, err := g.admin.Proof(ctx, g.agent, 0); !errors.As(err, &ce) || ce.Code != "checkpoint_diverged" {
			t.Errorf("round %d: proof of record 0: %v, want checkpoint_diverged", round, err)
		}
		v, err := g.admin.Verify(ctx, g.agent)
		if err != nil || v.OK || v.Seq == nil || *v.Seq != 3 || !strings.Contains(v.Message, "checkpoint_diverged") {
			t.Errorf("round %d: verify: %+v %v, want not ok at seq 3, checkpoint_diverged", round, v, err)
		}
		if vd, err := g.admin.Request(ctx, g.agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": 1}}); !errors.As(err, &ce) || ce.Code != "checkpoint_diverged" {
			t.Errorf("round %d: a request on the log cut to 3: %+v %v, want checkpoint_diverged", round, vd, err)
		}
		g.stop(syscall.SIGTERM)
	}
	// The CLI's verify of the data directory says the same.
	if code, out := lineagec(t, "verify", g.agent, "--data", g.data); code == 0 || !strings.Contains(out, "damaged at seq 3: checkpoint_diverged") {
		t.Errorf("lineagec verify: exit %d, %q; want 1 and checkpoint_diverged at seq 3", code, out)
	}
}

// TestServeRollbackReportedLost: the reproduction with the journal destroyed
// after the stop, so that no copy holds the records the log lost: after the
// restart the agent is reported damaged from record 3, never served as a log
// of 3 records: verify names record 3, no checkpoint is signed, and a
// request is refused (D255 (a cut no copy holds is noted at Close)).
func TestServeRollbackReportedLost(t *testing.T) {
	g := newRollbackRig(t)
	g.cut(t, 3)
	if stderr := g.stop(syscall.SIGTERM); !strings.Contains(stderr, g.agent) {
		t.Errorf("serve stopped without naming the damaged agent %s:\n%s", g.agent, stderr)
	}
	if err := os.Remove(filepath.Join(g.data, file.JournalName)); err != nil {
		t.Fatal(err)
	}
	g.start(t)
	ctx := context.Background()
	v, err := g.admin.Verify(ctx, g.agent)
	if err != nil || v.OK || v.Seq == nil || *v.Seq != 3 || !strings.Contains(v.Message, "records 3 to 5 are lost") {
		t.Fatalf("verify: %+v %v, want not ok at seq 3, records 3 to 5 lost", v, err)
	}
	if note, err := g.admin.Checkpoint(ctx, g.agent); err == nil {
		t.Errorf("a checkpoint of the damaged log was signed:\n%s", note)
	}
	if vd, err := g.admin.Request(ctx, g.agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": 1}}); err == nil {
		t.Errorf("a request on the damaged log was decided: %+v", vd)
	}
	g.stop(syscall.SIGTERM)
	if code, out := lineagec(t, "verify", g.agent, "--data", g.data); code == 0 || !strings.Contains(out, "damaged at seq 3: records 3 to 5 are lost") {
		t.Errorf("lineagec verify: exit %d, %q; want 1 and the damage at seq 3", code, out)
	}
}
