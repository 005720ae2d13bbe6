package runtime_test

import (
	"errors"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// TestServiceReads pins what the guard service reads beside runtime.go: a
// request's current verdict, an agent's name and policy, its pending requests
// with time and cost, how many are pending, and its stored lines from a seq.
// A fresh runtime over the same store answers the same (nothing is kept only
// in memory).
func TestServiceReads(t *testing.T) {
	st := memory.New()
	rt := runtime.Open(st, opts("watch"))
	c := mustCompileYAML(t, "budget: 10\ntools:\n  pay: {cost: 1}\n  wire: {cost: 4, requires_approval: true}\ndefault_rule: {cost: 2, requires_approval: true}\n")
	agent := mustCreate(t, rt, c, runtime.CreateOptions{Name: "bot", At: sec(0)})
	mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(1)})
	mustRequest(t, rt, agent, lineage.Request{ID: "w1", Tool: "wire", At: sec(2)})
	mustRequest(t, rt, agent, lineage.Request{ID: "o1", Tool: "other", Args: map[string]any{"k": "v"}, At: sec(3)})

	for _, r := range []*runtime.Runtime{rt, runtime.Open(st, reopenOpts())} {
		info, err := r.Info(bg, agent)
		if err != nil || info.Name != "bot" || info.Digest != c.Digest || string(info.Policy) != string(c.Document) || info.Seq != 4 || info.Status != lineage.Alive {
			t.Errorf("info: %+v %v", info, err)
		}
		pend, err := r.Pending(bg, agent)
		if err != nil || len(pend) != 2 {
			t.Fatalf("pending: %+v %v", pend, err)
		}
		if p := pend[0]; p.RequestID != "w1" || p.Cost != 4 || !p.At.Equal(sec(2)) || p.Seq != 3 {
			t.Errorf("first pending: %+v", p)
		}
		if p := pend[1]; p.RequestID != "o1" || p.Cost != 2 || !p.At.Equal(sec(3)) || p.Args["k"] != "v" {
			t.Errorf("second pending (default rule): %+v", p)
		}
		if n, err := r.PendingCount(bg, agent); n != 2 || err != nil {
			t.Errorf("pending count %d %v", n, err)
		}
		if v, err := r.RequestVerdict(bg, agent, "req_2"); err != nil || v.Decision != lineage.Allow || v.Seq != 2 {
			t.Errorf("verdict of req_2: %+v %v", v, err)
		}
		if _, err := r.RequestVerdict(bg, agent, "nope"); !errors.Is(err, lineage.ErrUnknownRequest) {
			t.Errorf("unknown request: %v", err)
		}
		var seqs []uint64
		if err := r.ScanLog(bg, agent, 3, func(seq uint64, _ []byte) error { seqs = append(seqs, seq); return nil }); err != nil || len(seqs) != 2 || seqs[0] != 3 {
			t.Errorf("scan from 3: %v %v", seqs, err)
		}
	}
	if _, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w1", By: "alice", At: sec(4)}); err != nil {
		t.Fatal(err)
	}
	if v, _ := rt.RequestVerdict(bg, agent, "w1"); v.Decision != lineage.Allow || v.Seq != 5 {
		t.Errorf("verdict after approval: %+v", v)
	}
	if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(5)}); err != nil {
		t.Fatal(err)
	}
	// o1 was pending at termination: void (docs/decision-order.md step 1).
	if v, _ := rt.RequestVerdict(bg, agent, "o1"); v.Decision != lineage.Deny || v.Reason != "terminated" {
		t.Errorf("verdict of a request pending at termination: %+v", v)
	}
	if pend, _ := rt.Pending(bg, agent); len(pend) != 0 {
		t.Errorf("pending after termination: %+v", pend)
	}
	for _, err := range []error{
		func() error { _, err := rt.Info(bg, "agt_none"); return err }(),
		func() error { _, err := rt.Pending(bg, "agt_none"); return err }(),
		rt.ScanLog(bg, "agt_none", 0, func(uint64, []byte) error { return nil }),
	} {
		if !errors.Is(err, lineage.ErrUnknownAgent) {
			t.Errorf("unknown agent: %v", err)
		}
	}
}
