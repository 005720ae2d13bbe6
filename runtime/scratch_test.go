package runtime_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// TestScratchDecidesAsTheRuntime: a scratch agent given the acts of a real
// agent (args as canonical JSON) answers each with the same verdict or the
// same error, and ends in the same state with the same head: the log it
// would have written is the real one (D190: replay runs on a scratch agent).
func TestScratchDecidesAsTheRuntime(t *testing.T) {
	c := mustCompileYAML(t, samplePolicy)
	rt := runtime.Open(newMem(), opts("scratch"))
	agent := mustCreate(t, rt, c, runtime.CreateOptions{Name: "s", At: t0})
	sc, err := rt.NewScratch(bg, c, agent, runtime.ScratchOptions{CreateOptions: runtime.CreateOptions{Name: "s", At: t0}, Chain: true})
	if err != nil {
		t.Fatal(err)
	}
	// Without the chain: the same verdicts and state, no head.
	unchained, err := rt.NewScratch(bg, c, agent, runtime.ScratchOptions{CreateOptions: runtime.CreateOptions{Name: "s", At: t0}})
	if err != nil {
		t.Fatal(err)
	}
	deep := map[string]any{}
	for i, m := 0, deep; i < 40; i++ {
		next := map[string]any{}
		m["a"], m = next, next
	}
	type act struct {
		req     *lineage.Request
		approve *runtime.Approval
		reject  bool
		kill    *runtime.Kill
	}
	req := func(id, tool string, args map[string]any, s float64) act {
		return act{req: &lineage.Request{ID: id, Tool: tool, Args: args, At: sec(s)}}
	}
	ap := func(id string, s float64) act {
		return act{approve: &runtime.Approval{RequestID: id, By: "alice", At: sec(s)}}
	}
	acts := []act{
		req("", "pay", nil, 1),
		req("w1", "wire", map[string]any{"to": "acme", "n": json.Number("3")}, 2),
		req("", "search", map[string]any{"q": "secret"}, 3),
		req("", "search", map[string]any{"q": "ok"}, 4),
		req("w1", "wire", map[string]any{"to": "acme", "n": json.Number("3")}, 5),  // a retry
		req("w1", "pay", nil, 5),                                                   // id_conflict
		req("", "pay", deep, 6),                                                    // too deep
		req("", "search", map[string]any{"n": json.Number("9007199254740993")}, 6), // too big
		req("req_9", "pay", nil, 6),                                                // reserved id
		req("", "wire", nil, 7),                                                    // pending req_<seq>
		ap("w1", 8),
		ap("w1", 9), // not pending now
		ap("nope", 9),
		{approve: &runtime.Approval{RequestID: "req_9", By: agent, At: sec(9)}}, // the agent itself
		req("", "wire", nil, 10),
		{approve: &runtime.Approval{RequestID: "req_11", By: "bob", At: sec(11)}, reject: true},
		req("", "pay", nil, 1), // time backwards
		{kill: &runtime.Kill{By: "ops", Note: "done", At: sec(12)}},
		req("", "pay", nil, 13),
		ap("req_9", 14), // sealed
		{kill: &runtime.Kill{By: "ops", At: sec(15)}},
	}
	errorsSeen := 0
	for i, a := range acts {
		var want lineage.Verdict
		var werr error
		on := func(sc *runtime.Scratch) (lineage.Verdict, error) {
			switch {
			case a.req != nil:
				var raw []byte
				if a.req.Args != nil {
					if raw, err = json.Marshal(a.req.Args); err != nil {
						t.Fatal(err)
					}
				}
				args, err := runtime.CheckArgs(raw)
				if err != nil {
					return lineage.Verdict{}, err
				}
				return sc.Request(bg, runtime.CanonicalRequest{ID: a.req.ID, Tool: a.req.Tool, Args: args, At: a.req.At})
			case a.approve != nil && a.reject:
				return sc.Reject(bg, *a.approve)
			case a.approve != nil:
				return sc.Approve(bg, *a.approve)
			}
			return lineage.Verdict{}, sc.Terminate(*a.kill)
		}
		switch {
		case a.req != nil:
			want, werr = rt.Request(bg, agent, *a.req)
		case a.approve != nil && a.reject:
			want, werr = rt.Reject(bg, agent, *a.approve)
		case a.approve != nil:
			want, werr = rt.Approve(bg, agent, *a.approve)
		default:
			_, werr = rt.Terminate(bg, agent, *a.kill)
		}
		got, gerr := on(sc)
		if v, err := on(unchained); !reflect.DeepEqual(v, got) || (err == nil) != (gerr == nil) {
			t.Fatalf("act %d: chained %+v %v, unchained %+v %v", i, got, gerr, v, err)
		}
		if !reflect.DeepEqual(want, got) || (werr == nil) != (gerr == nil) {
			t.Fatalf("act %d: runtime %+v %v, scratch %+v %v", i, want, werr, got, gerr)
		}
		if werr != nil {
			errorsSeen++
			if unwrapped(werr) != unwrapped(gerr) {
				t.Errorf("act %d: runtime %v, scratch %v", i, werr, gerr)
			}
		}
	}
	if errorsSeen < 8 {
		t.Errorf("only %d acts were refused", errorsSeen)
	}
	if want, got := normalizeState(mustState(t, rt, agent)), normalizeState(sc.State()); !reflect.DeepEqual(want, got) {
		t.Fatalf("state:\n runtime %+v\n scratch %+v", want, got)
	}
	want, got := normalizeState(mustState(t, rt, agent)), normalizeState(unchained.State())
	if got.Head != "" {
		t.Fatalf("an unchained scratch agent has head %s", got.Head)
	}
	if want.Head = ""; !reflect.DeepEqual(want, got) {
		t.Fatalf("state:\n runtime %+v\n unchained %+v", want, got)
	}
}

// unwrapped is the sentinel an error wraps: its text up to the first colon.
func unwrapped(err error) string {
	for _, e := range []error{lineage.ErrBadRequest, lineage.ErrIDConflict, lineage.ErrNotPending, lineage.ErrSealed,
		lineage.ErrTimeBackwards, lineage.ErrBadApprover} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return strings.SplitN(err.Error(), ":", 2)[0]
}
