package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/conformance/model"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/policy/policytest"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// The differential test holds the runtime (compiler → Rego → OPA → log → fold)
// against the independent reference model: seeded random policies × random
// request / approve / reject / terminate / retry sequences must agree on every
// verdict, every error and the final state.
var (
	diffPolicies  = flag.Int("diff.policies", 250, "random policies in TestDifferential")
	diffSequences = flag.Int("diff.sequences", 80, "random sequences per policy in TestDifferential")
	diffSeed      = flag.Uint64("diff.seed", 0, "replay one failing seed (policy seed; see the failure message)")
	diffSequence  = flag.Int("diff.sequence", -1, "with -diff.seed: replay only this sequence")
)

// op is one step of a sequence, applied to both sides.
type op struct {
	kind string // request, approve, reject, terminate
	req  lineage.Request
	id   string
	by   string
}

func (o op) String() string {
	switch o.kind {
	case "request":
		args, _ := json.Marshal(o.req.Args)
		return fmt.Sprintf("request{id:%q tool:%s args:%s at:%s}", o.req.ID, o.req.Tool, args, o.req.At.Sub(Genesis))
	case "terminate":
		return fmt.Sprintf("terminate{by:%s at:%s}", o.by, o.req.At.Sub(Genesis))
	default:
		return fmt.Sprintf("%s{id:%q by:%s at:%s}", o.kind, o.id, o.by, o.req.At.Sub(Genesis))
	}
}

func randomOps(r *rand.Rand, n int) []op {
	var ops []op
	var ids []string
	now := Genesis
	for i := 0; i < n; i++ {
		switch x := r.IntN(100); {
		case x < 3:
			now = now.Add(-time.Duration(1 + r.IntN(2e9))) // time backwards: an error on both sides
		case x < 60:
			now = now.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
		case x < 70:
			now = now.Add(time.Duration(r.IntN(3)) * time.Second) // exact window edges
		}
		o := op{req: lineage.Request{At: now}}
		if r.IntN(100) == 0 { // a time the runtime cannot hold (D50: the times the guard holds): an error on both sides
			o.req.At = []time.Time{time.Unix(0, 0).Add(-1), time.Date(2262, 4, 11, 23, 47, 16, 854775808, time.UTC), time.Date(2610, 1, 1, 0, 0, 0, 0, time.UTC)}[r.IntN(3)]
		}
		switch x := r.IntN(100); {
		case x < 70:
			o.kind = "request"
			o.req.Tool = policytest.Tools[r.IntN(len(policytest.Tools))]
			if r.IntN(10) == 0 {
				o.req.Tool = "bad tool!"
			}
			switch y := r.IntN(10); {
			case y < 4:
				o.req.ID = fmt.Sprintf("r%d", len(ids))
				ids = append(ids, o.req.ID)
			case y < 6 && len(ids) > 0:
				o.req.ID = ids[r.IntN(len(ids))] // a retry, or an id conflict
			case y == 6:
				o.req.ID = fmt.Sprintf("req_%d", 2+r.IntN(6)) // an assigned id: retry or reserved
			}
			if r.IntN(4) > 0 {
				args := map[string]any{}
				if r.IntN(3) > 0 {
					args["amount"] = json.Number(fmt.Sprint(r.IntN(10)))
					if r.IntN(4) == 0 {
						args["amount"] = json.Number(fmt.Sprintf("%d.5", r.IntN(10)))
					}
				}
				if r.IntN(4) == 0 {
					args["to"] = fmt.Sprintf("evil%d", r.IntN(3))
				}
				// Shapes an argument schema may refuse.
				switch r.IntN(12) {
				case 0:
					args["amount"] = fmt.Sprint(r.IntN(10))
				case 1:
					args["amount"] = nil
				case 2:
					args["to"] = []any{fmt.Sprintf("evil%d", r.IntN(3))}
				case 3:
					args["to"] = nil
				case 4:
					args["extra"] = true
				}
				o.req.Args = args
			}
		case x < 85:
			o.kind = "approve"
		case x < 95:
			o.kind = "reject"
		default:
			o.kind = "terminate"
			o.by = []string{"ops", "ops", "ops", " ops", "$SELF"}[r.IntN(5)]
		}
		if o.kind == "approve" || o.kind == "reject" {
			o.by = []string{"alice", "bob", "", "$self", "$SELF", "bob ", "al\u200bice", "Alice\n"}[r.IntN(8)]
			if r.IntN(5) == 0 {
				o.by = "alice"
			}
			o.id = fmt.Sprintf("req_%d", 2+r.IntN(12))
			if len(ids) > 0 && r.IntN(2) == 0 {
				o.id = ids[r.IntN(len(ids))]
			}
		}
		ops = append(ops, o)
	}
	return ops
}

var sentinels = []error{lineage.ErrBadRequest, lineage.ErrIDConflict, lineage.ErrSealed, lineage.ErrNotPending,
	lineage.ErrBadApprover, lineage.ErrTimeBackwards}

func errClass(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "other: " + err.Error()
}

// comparable strips what only the runtime has (the chain head).
func comparableState(s lineage.State) lineage.State {
	s.Head = ""
	s.Agent = ""
	if len(s.Window) == 0 {
		s.Window = nil
	}
	for i, t := range s.Window {
		s.Window[i] = lineage.Time{Time: t.UTC()}
	}
	return s
}

type diffSide struct {
	rt *runtime.Runtime
	c  *policy.Compiled
}

// runSequence runs ops on a fresh agent on both sides; it returns the first disagreement.
func runSequence(ctx context.Context, side *diffSide, ops []op) error {
	agent, err := side.rt.CreateAgent(ctx, side.c, runtime.CreateOptions{At: Genesis})
	if err != nil {
		return fmt.Errorf("create: %v", err)
	}
	m, err := model.New(agent, side.c.Policy, Genesis)
	if err != nil {
		return fmt.Errorf("model: %v", err)
	}
	for i, o := range ops {
		var (
			gv, wv     lineage.Verdict
			gerr, werr error
		)
		switch o.by { // the agent approving itself: refused on both sides
		case "$self":
			o.by = agent
		case "$SELF":
			o.by = strings.ToUpper(agent)
		}
		switch o.kind {
		case "request":
			gv, gerr = side.rt.Request(ctx, agent, o.req)
			wv, werr = m.Request(o.req)
		case "approve":
			gv, gerr = side.rt.Approve(ctx, agent, runtime.Approval{RequestID: o.id, By: o.by, At: o.req.At})
			wv, werr = m.Approve(o.id, o.by, o.req.At)
		case "reject":
			gv, gerr = side.rt.Reject(ctx, agent, runtime.Approval{RequestID: o.id, By: o.by, At: o.req.At})
			wv, werr = m.Reject(o.id, o.by, o.req.At)
		case "terminate":
			_, gerr = side.rt.Terminate(ctx, agent, runtime.Kill{By: o.by, At: o.req.At})
			werr = m.Terminate(o.by, o.req.At)
		}
		if errClass(gerr) != errClass(werr) {
			return fmt.Errorf("op %d %s: runtime error %q, model error %q", i, o, errClass(gerr), errClass(werr))
		}
		if !reflect.DeepEqual(gv, wv) {
			return fmt.Errorf("op %d %s:\n  runtime %s\n  model   %s", i, o, show(gv), show(wv))
		}
	}
	got, err := side.rt.State(ctx, agent)
	if err != nil {
		return err
	}
	gs, ws := comparableState(got), comparableState(m.State())
	if !reflect.DeepEqual(gs, ws) {
		return fmt.Errorf("final state:\n  runtime %s\n  model   %s", show(gs), show(ws))
	}
	if err := side.rt.Verify(agent); err != nil {
		return fmt.Errorf("chain: %v", err)
	}
	return nil
}

func newDiffSide(t testing.TB, p policy.Policy) *diffSide {
	c, err := compiler.CompilePolicy(p)
	if err != nil {
		raw, _ := json.Marshal(p)
		t.Fatalf("random policy does not compile: %v\n%s", err, raw)
	}
	n := 0 // each sequence gets a fresh agent on the shared runtime (one prepared query per policy)
	rt := runtime.Open(memory.New(), runtime.Options{NewAgentID: func() string { n++; return fmt.Sprintf("agt_diff_%d", n) }})
	return &diffSide{rt: rt, c: c}
}

func TestDifferential(t *testing.T) {
	ctx := context.Background()
	policies, sequences := *diffPolicies, *diffSequences
	if testing.Short() {
		policies, sequences = 20, 20
	}
	first := uint64(1)
	if *diffSeed != 0 {
		first, policies = *diffSeed, 1
	}
	total := 0
	for ps := first; ps < first+uint64(policies); ps++ {
		r := rand.New(rand.NewPCG(ps, 0x11ea9e))
		p := policytest.Random(r)
		side := newDiffSide(t, p)
		for s := 0; s < sequences; s++ {
			if *diffSequence >= 0 && s != *diffSequence {
				continue
			}
			sr := rand.New(rand.NewPCG(ps, uint64(s)))
			ops := randomOps(sr, 5+sr.IntN(30))
			if err := runSequence(ctx, side, ops); err != nil {
				raw, _ := json.Marshal(p)
				t.Fatalf("disagreement (replay: go test ./conformance -run TestDifferential -diff.seed %d -diff.sequence %d)\npolicy %s\n%v",
					ps, s, raw, err)
			}
			total++
		}
	}
	t.Logf("%d sequences agreed", total)
	if *diffSeed == 0 && !testing.Short() && total < 20000 {
		t.Fatalf("ran %d sequences, the suite promises at least 20,000", total)
	}
}

// FuzzDifferential keeps generating policies and sequences from fuzzed seeds.
func FuzzDifferential(f *testing.F) {
	for i := uint64(0); i < 8; i++ {
		f.Add(i, i*7)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, policySeed, seqSeed uint64) {
		r := rand.New(rand.NewPCG(policySeed, 0x11ea9e))
		side := newDiffSide(t, policytest.Random(r))
		sr := rand.New(rand.NewPCG(policySeed, seqSeed))
		if err := runSequence(ctx, side, randomOps(sr, 5+sr.IntN(40))); err != nil {
			t.Fatalf("policy seed %d, sequence seed %d: %v", policySeed, seqSeed, err)
		}
	})
}
