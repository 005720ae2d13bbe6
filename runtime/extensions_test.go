package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// loopPolicy has an extension whose work the agent chooses: n² iterations.
const loopPolicy = `budget: 100
tools:
  loop: {cost: 1}
rego:
  - source: |
      package lineage.ext.slow

      deny contains {"reason": "never", "scar": "severe"} if {
      	input.request.tool == "loop"
      	xs := [1 | some i in numbers.range(1, input.request.args.n); some j in numbers.range(1, input.request.args.n)]
      	count(xs) < 0
      }
`

// TestExtensionDeadline: an evaluation over the deadline (100 ms unless set)
// denies extension_error without a scar, is recorded, and returns at about
// the deadline (issue 9: numbers.range(1, 30000) twice ran for over 60 s
// holding the store).
func TestExtensionDeadline(t *testing.T) {
	c := mustCompileYAML(t, loopPolicy)
	rt := runtime.Open(newMem(), opts("deadline"))
	a := mustCreate(t, rt, c, runtime.CreateOptions{})
	start := time.Now()
	v := mustRequest(t, rt, a, lineage.Request{ID: "r1", Tool: "loop", Args: map[string]any{"n": 30000}, At: sec(1)})
	took := time.Since(start)
	if v.Decision != lineage.Deny || v.Reason != "extension_error" || v.Scar != nil || v.Terminated != "" {
		t.Fatalf("verdict %+v, want deny extension_error without a scar", v)
	}
	// 9×10⁸ iterations take minutes: returning within seconds is the deadline.
	if took > 5*time.Second {
		t.Errorf("the request took %v with a deadline of %v", took, runtime.DefaultEvalDeadline)
	}
	// Recorded: the retry answers from the log; the agent takes the next request.
	if again := mustRequest(t, rt, a, lineage.Request{ID: "r1", Tool: "loop", Args: map[string]any{"n": 30000}, At: sec(2)}); again != v {
		t.Errorf("retry %+v, want the recorded %+v", again, v)
	}
	if v := mustRequest(t, rt, a, lineage.Request{Tool: "loop", Args: map[string]any{"n": 10}, At: sec(3)}); v.Decision != lineage.Allow || v.Seq != 3 {
		t.Errorf("small loop: %+v, want allow at seq 3", v)
	}
	if s := mustState(t, rt, a); s.Seq != 3 || s.ScarScore != 0 {
		t.Errorf("state seq %d scar score %d, want 3 and 0", s.Seq, s.ScarScore)
	}

	// The deadline is an option: a generous one lets the same work finish.
	o := opts("slowok")
	o.EvalDeadline = time.Minute
	rt2 := runtime.Open(newMem(), o)
	b := mustCreate(t, rt2, c, runtime.CreateOptions{})
	if v := mustRequest(t, rt2, b, lineage.Request{Tool: "loop", Args: map[string]any{"n": 300}, At: sec(1)}); v.Decision != lineage.Allow {
		t.Errorf("within a minute: %+v, want allow", v)
	}
	o = opts("tight")
	o.EvalDeadline = time.Nanosecond
	rt3 := runtime.Open(newMem(), o)
	d := mustCreate(t, rt3, c, runtime.CreateOptions{})
	// 9×10⁶ iterations: seconds, so the timer surely fires first.
	if v := mustRequest(t, rt3, d, lineage.Request{Tool: "loop", Args: map[string]any{"n": 3000}, At: sec(1)}); v.Reason != "extension_error" {
		t.Errorf("within a nanosecond: %+v, want extension_error", v)
	}
}

// TestRuntimeRefusesForbiddenBuiltins: the runtime prepares every policy with
// the allowlist's capabilities itself, so a compiled policy that never went
// through the compiler's check (edited, or built by hand) cannot reach
// http.send either (defence in depth, docs/extensions.md).
func TestRuntimeRefusesForbiddenBuiltins(t *testing.T) {
	for name, src := range map[string]string{
		"call":     "package lineage.ext.x\n\ndeny contains {\"reason\": \"r\"} if http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:1\"})\n",
		"with":     "package lineage.ext.x\n\ng(x) := x\n\ndeny contains {\"reason\": \"r\"} if {\n\tr := g({}) with g as http.send\n\tr\n}\n",
		"rand":     "package lineage.ext.x\n\ndeny contains {\"reason\": \"r\"} if rand.intn(\"x\", 2) == 0\n",
		"time":     "package lineage.ext.x\n\ndeny contains {\"reason\": \"r\"} if time.now_ns() > 0\n",
		"unlisted": "package lineage.ext.x\n\ndeny contains {\"reason\": \"r\"} if net.cidr_contains(\"10.0.0.0/8\", \"10.0.0.1\")\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := mustCompileYAML(t, "budget: 10\ntools: {pay: {cost: 1}}\nrego:\n  - source: |\n      package lineage.ext.x\n\n      deny contains {\"reason\": \"r\"} if input.request.args.x\n")
			edited := *c
			edited.Modules = append(edited.Modules[:0:0], c.Modules...)
			// Built by hand: no compilation of the compiler's own comes with
			// it (Compiled.Compiler is the compilation of Modules, D61 (compiled once)).
			edited.Compiler = nil
			found := false
			for i, m := range edited.Modules {
				if strings.HasPrefix(m.Name, "ext/") {
					edited.Modules[i].Source, found = src, true
				}
			}
			if !found {
				t.Fatal("no extension module in the compiled policy")
			}
			rt := runtime.Open(newMem(), opts("caps"))
			id, err := rt.CreateAgent(bg, &edited, runtime.CreateOptions{At: t0})
			if err == nil {
				v, err := rt.Request(bg, id, lineage.Request{Tool: "pay", At: sec(1)})
				t.Fatalf("created agent %s with a forbidden builtin; request: %+v, %v", id, v, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "undefined function") && !strings.Contains(msg, "is unsafe") {
				t.Errorf("CreateAgent failed for another reason: %v", err)
			}
		})
	}
}
