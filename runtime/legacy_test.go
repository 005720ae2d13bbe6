package runtime_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/replay"
	"github.com/lineage-guard/lineage/runtime"
)

// legacyAgent is a log written by lineagec at main 081c5ed, before max_pending
// existed (testdata/legacy-no-max-pending, policy.yaml its source): three
// insufficient_budget denials, fifteen deploys that need approval, one
// approved, one rejected: 13 pending at the end, over today's default of 10.
const (
	legacyAgent  = "agt_p5hef2y6myywif2pnt6shgemuu"
	legacyHead   = "sha256:ac74abfa3ce14341eb6892d9816e5e8b0ac523f618a3e4b0fa0fa9fc684de6d6"
	legacyDigest = "sha256:6193ae54d068f9ed5c7112fa27680270e18ff05b98a129bf9a4d23e75f546b34"
)

// TestLegacyPolicyKeepsNoPendingLimit pins D260 (policies recorded before
// max_pending keep no limit): a log written before the field existed opens,
// verifies and replays exactly as before, its policy keeps its digest, and a
// 14th pending request is still pending.
func TestLegacyPolicyKeepsNoPendingLimit(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "legacy-no-max-pending", legacyAgent+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, legacyAgent+".jsonl"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	st := openFileStore(t, dir)
	defer st.Close()
	rt := runtime.Open(st, reopenOpts())
	if err := rt.Verify(legacyAgent); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// A runtime given no Compile reopens it with compiler.CompileRecorded
	// (D405 (a nil Compile is the compiler's)); compiler.Compile would not.
	if err := runtime.Open(st, runtime.Options{}).Verify(legacyAgent); err != nil {
		t.Fatalf("Verify with the default Compile: %v", err)
	}
	s := mustState(t, rt, legacyAgent)
	if s.Head != legacyHead || len(s.Pending) != 13 || s.ScarScore != 0 {
		t.Fatalf("state: head %s, %d pending, scar %d; want %s, 13, 0", s.Head, len(s.Pending), s.ScarScore, legacyHead)
	}

	// The recorded document compiles to its recorded digest, with no limit;
	// the same policy written today gets the default and another digest.
	recs, err := rt.Records(legacyAgent)
	if err != nil {
		t.Fatal(err)
	}
	var pb lineage.PolicyBody
	if err := json.Unmarshal(recs[1].Body, &pb); err != nil {
		t.Fatal(err)
	}
	c, err := compiler.CompileRecorded(pb.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest != legacyDigest || c.Policy.MaxPending != nil {
		t.Fatalf("recorded policy compiles to %s, max_pending %v; want %s and none", c.Digest, c.Policy.MaxPending, legacyDigest)
	}
	if today, err := compiler.Compile("", pb.Policy); err != nil || today.Digest == legacyDigest || *today.Policy.MaxPending != 10 {
		t.Fatalf("the same document as a new policy: %v; want max_pending 10 and another digest", err)
	}

	// Replayed under its own recorded policy, the log is the same, byte for byte.
	rep, err := replay.Run(bg, recs, c, replay.Options{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Head != legacyHead || len(rep.Events) != 0 {
		t.Fatalf("replay: head %s, %d differing events; want %s and none", rep.Head, len(rep.Events), legacyHead)
	}

	// A 14th pending request: no limit.
	v := mustRequest(t, rt, legacyAgent, lineage.Request{ID: "d16", Tool: "deploy", At: time.Now()})
	if v.Decision != lineage.Pending {
		t.Fatalf("d16: %+v, want pending (no max_pending for a recorded policy)", v)
	}
}
