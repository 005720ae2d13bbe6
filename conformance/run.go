package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// Result is the outcome of one case.
type Result struct {
	ID       string   `json:"id"` // "<file>/<case name>"
	File     string   `json:"file"`
	Name     string   `json:"name"`
	Status   string   `json:"status"` // "pass", "fail", "skip"
	Failures []string `json:"failures,omitempty"`
	Reason   string   `json:"reason,omitempty"` // why skipped
	Duration float64  `json:"duration_secs"`
}

// Passed tells whether the case passed.
func (r Result) Passed() bool { return r.Status == "pass" }

// compileCase compiles the policy a case runs against; dir resolves extension paths.
func (c *Case) compile() (*policy.Compiled, error) {
	return compiler.CompileDocument(c.File.doc.Sub(c.policyPtr), filepath.Dir(c.File.Path))
}

// Run executes one case against the real pipeline: its policy compiled by the
// compiler, each step decided by a fresh runtime over a memory store.
func (c *Case) Run(ctx context.Context) Result {
	return c.run1(ctx, nil)
}

func (c *Case) run1(ctx context.Context, cov *coverageSink) Result {
	start := time.Now()
	res := Result{ID: c.ID(), File: c.File.Path, Name: c.Name}
	res.Failures = c.run(ctx, cov)
	res.Status = "pass"
	if len(res.Failures) > 0 {
		res.Status = "fail"
	}
	res.Duration = time.Since(start).Seconds()
	return res
}

// run runs the case; cov, when not nil, collects what its verdicts reached.
func (c *Case) run(ctx context.Context, cov *coverageSink) []string {
	compiled, err := c.compile()
	if c.CompileErr != nil {
		if err == nil {
			return []string{"expected a compile error, but the policy compiled"}
		}
		var fails []string
		if p := c.CompileErr.Path; p != "" && !strings.Contains(err.Error(), p) {
			fails = append(fails, fmt.Sprintf("compile error does not name %s:\n%s", p, indent(err.Error())))
		}
		if code := c.CompileErr.Code; code != "" && !strings.Contains(err.Error(), "("+code+")") {
			fails = append(fails, fmt.Sprintf("compile error has no code %s:\n%s", code, indent(err.Error())))
		}
		return fails
	}
	if err != nil {
		return []string{"policy does not compile:\n" + indent(err.Error())}
	}
	if c.assertions() == 0 {
		return []string{"the case asserts nothing: give a step an expect, or add expect_state"}
	}
	opts := runtime.Options{
		Clock:      func() time.Time { return Genesis },
		NewAgentID: func() string { return "agt_conformance" },
	}
	var pc *policyCoverage
	if cov != nil {
		pc = cov.policy(c, compiled)
		opts.OnDecision = func(_ string, in ast.Value) { pc.inputs = append(pc.inputs, in) }
	}
	rt := runtime.Open(memory.New(), opts)
	agent, err := rt.CreateAgent(ctx, compiled, runtime.CreateOptions{At: Genesis})
	if err != nil {
		return []string{"creating the agent: " + err.Error()}
	}
	var fails []string
	now := Genesis
	for _, s := range c.Steps {
		tool := pc.toolOf(ctx, rt, agent, s)
		v, stepErr := c.step(ctx, rt, agent, s, &now)
		if pc != nil && stepErr == nil && v != nil {
			pc.reach(tool, *v)
		}
		if s.Expect == nil {
			if stepErr != nil {
				fails = append(fails, fmt.Sprintf("step %d (%s): unexpected error: %v", s.Index+1, s.describe(), stepErr))
			}
			continue
		}
		st, err := rt.State(ctx, agent)
		if err != nil {
			return append(fails, "reading state: "+err.Error())
		}
		for _, f := range compareStep(s.Expect, v, stepErr, st) {
			fails = append(fails, fmt.Sprintf("step %d (%s): %s", s.Index+1, s.describe(), f))
		}
	}
	if c.ExpectState != nil {
		st, err := rt.State(ctx, agent)
		if err != nil {
			return append(fails, "reading state: "+err.Error())
		}
		for _, f := range compareState(c.ExpectState, st) {
			fails = append(fails, "expect_state: "+f)
		}
	}
	if err := rt.Verify(agent); err != nil {
		fails = append(fails, "the log does not verify: "+err.Error())
	}
	return fails
}

func (c *Case) assertions() int {
	n := len(c.ExpectState)
	for _, s := range c.Steps {
		n += len(s.Expect)
	}
	return n
}

func (s Step) describe() string {
	switch {
	case s.Request != nil:
		if tool, ok := s.Request.Tool.(string); ok {
			return "request " + tool
		}
		return fmt.Sprintf("request (tool %v)", s.Request.Tool)
	case s.Approve != nil:
		return "approve " + s.Approve.Request
	case s.Reject != nil:
		return "reject " + s.Reject.Request
	default:
		return "terminate"
	}
}

// step performs one step; now carries the time of the previous step (D9: conformance time).
func (c *Case) step(ctx context.Context, rt *runtime.Runtime, agent string, s Step, now *time.Time) (*lineage.Verdict, error) {
	at := func(n *json.Number) (time.Time, error) {
		if n == nil {
			return *now, nil
		}
		t, err := atTime(*n)
		if err != nil {
			return t, err
		}
		*now = t
		return t, nil
	}
	switch {
	case s.Request != nil:
		t, err := at(s.Request.At)
		if err != nil {
			return nil, err
		}
		req, err := s.Request.request()
		if err != nil {
			return nil, err
		}
		req.At = t
		v, err := rt.Request(ctx, agent, req)
		return &v, err
	case s.Approve != nil, s.Reject != nil:
		a, decide := s.Approve, rt.Approve
		if a == nil {
			a, decide = s.Reject, rt.Reject
		}
		t, err := at(a.At)
		if err != nil {
			return nil, err
		}
		v, err := decide(ctx, agent, runtime.Approval{RequestID: a.Request, By: a.By, At: t})
		return &v, err
	default:
		t, err := at(s.Terminate.At)
		if err != nil {
			return nil, err
		}
		_, err = rt.Terminate(ctx, agent, runtime.Kill{By: s.Terminate.By, Note: s.Terminate.Reason, At: t})
		return nil, err
	}
}

// compareStep checks the fields an expect lists, and only those.
func compareStep(exp map[string]any, v *lineage.Verdict, stepErr error, st lineage.State) []string {
	var fails []string
	keys := slices.Sorted(maps.Keys(exp))
	if want, ok := exp["error"]; ok {
		switch w := want.(type) {
		case bool:
			if w && stepErr == nil {
				fails = append(fails, fmt.Sprintf("expected an error, got %s", verdictText(v)))
			}
			if !w && stepErr != nil {
				fails = append(fails, "expected no error, got: "+stepErr.Error())
			}
		case string:
			if stepErr == nil {
				fails = append(fails, fmt.Sprintf("expected an error containing %q, got %s", w, verdictText(v)))
			} else if !strings.Contains(stepErr.Error(), w) {
				fails = append(fails, fmt.Sprintf("expected an error containing %q, got: %v", w, stepErr))
			}
		}
	} else if stepErr != nil {
		return []string{"unexpected error: " + stepErr.Error()}
	}
	for _, k := range keys {
		want := exp[k]
		if want == nil && (k == "terminated" || k == "scar") {
			want = "none" // null and none say the same (docs/cases.md)
		}
		var got any
		switch k {
		case "error":
			continue
		case "remaining":
			got = st.Remaining
		case "scar_score":
			got = st.ScarScore
		case "status":
			got = string(st.Status)
		default:
			if v == nil {
				if stepErr == nil {
					fails = append(fails, fmt.Sprintf("%s: this step has no verdict", k))
				}
				continue
			}
			got = verdictField(k, v)
		}
		if !same(want, got) {
			fails = append(fails, fmt.Sprintf("%s: expected %v, got %v", k, show(want), show(got)))
		}
	}
	return fails
}

func verdictField(k string, v *lineage.Verdict) any {
	switch k {
	case "decision":
		return string(v.Decision)
	case "reason":
		return v.Reason
	case "cost":
		return v.Cost
	case "scar":
		if v.Scar == nil {
			return "none"
		}
		return string(v.Scar.Severity)
	case "terminated":
		if v.Terminated == "" {
			return "none"
		}
		return string(v.Terminated)
	case "request_id":
		return v.RequestID
	case "seq":
		return int64(v.Seq)
	}
	return fmt.Sprintf("<unknown field %s>", k)
}

// compareState checks the state fields expect_state lists (docs/decision-order.md#folded-state).
func compareState(exp map[string]any, st lineage.State) []string {
	var fails []string
	for _, k := range slices.Sorted(maps.Keys(exp)) {
		want := exp[k]
		var got any
		switch k {
		case "seq":
			got = int64(st.Seq)
		case "status":
			got = string(st.Status)
		case "termination":
			got = string(st.Termination)
			if st.Termination == "" {
				got = "none"
			}
		case "budget":
			got = st.Budget
		case "spent":
			got = st.Spent
		case "remaining":
			got = st.Remaining
		case "scar_score":
			got = st.ScarScore
		case "scars":
			m := map[string]any{}
			wm, _ := want.(map[string]any)
			for sev := range wm {
				m[sev] = st.Scars[lineage.Severity(sev)]
			}
			got = m
		case "calls":
			m := map[string]any{}
			for tool, n := range st.Calls {
				m[tool] = n
			}
			got = m
		case "window":
			var w []any
			for _, t := range st.Window {
				w = append(w, secondsText(t.Time))
			}
			got = w
			want = windowText(want)
		case "pending":
			ids := []any{}
			for id := range st.Pending {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i].(string) < ids[j].(string) })
			got = ids
			want = sortedStrings(want)
		default:
			got = fmt.Sprintf("<unknown state field %s>", k)
		}
		if !same(want, got) {
			fails = append(fails, fmt.Sprintf("%s: expected %v, got %v", k, show(want), show(got)))
		}
	}
	return fails
}

// secondsText renders a time as exact seconds after genesis ("1.5", "60").
func secondsText(t time.Time) string {
	ns := t.Sub(Genesis).Nanoseconds()
	s := strconv.FormatInt(ns/1e9, 10)
	if frac := ns % 1e9; frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	}
	return s
}

func windowText(want any) any {
	list, ok := want.([]any)
	if !ok {
		return want
	}
	out := make([]any, len(list))
	for i, x := range list {
		out[i] = x
		if n, ok := x.(json.Number); ok {
			if t, err := atTime(n); err == nil {
				out[i] = secondsText(t)
			}
		}
	}
	return out
}

func sortedStrings(want any) any {
	list, ok := want.([]any)
	if !ok {
		return want
	}
	out := append([]any{}, list...)
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]) < fmt.Sprint(out[j]) })
	return out
}

// same compares an expected value (decoded JSON, numbers as json.Number) with
// an actual one, numbers by value.
func same(want, got any) bool {
	return reflect.DeepEqual(normal(want), normal(got))
}

func normal(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		return string(x)
	case int:
		return int64(x)
	case uint64:
		return int64(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normal(e)
		}
		return out
	case []any:
		if len(x) == 0 {
			return []any(nil)
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normal(e)
		}
		return out
	}
	return v
}

func show(v any) string {
	b, err := json.Marshal(normal(v))
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func verdictText(v *lineage.Verdict) string {
	if v == nil {
		return "no error"
	}
	return fmt.Sprintf("verdict %s %s", v.Decision, v.Reason)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
