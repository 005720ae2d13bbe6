package conformance

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler/analyze"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/policy/policytest"
	"github.com/lineage-guard/lineage/runtime"
)

// The property test of `lineagec analyze` (docs/authoring.md#bounds): random
// policies (the differential test's generator, CEL constraints included) ×
// random request / approve / reject / terminate sequences run through the
// real runtime never exceed a bound analyze stated; and for the same policy
// without constraints, a constructed sequence reaches every bound.
var (
	boundPolicies  = flag.Int("bounds.policies", 200, "random policies in TestAnalyzeBounds")
	boundSequences = flag.Int("bounds.sequences", 40, "random sequences per policy in TestAnalyzeBounds")
)

func TestAnalyzeBounds(t *testing.T) {
	ctx := context.Background()
	policies, sequences := *boundPolicies, *boundSequences
	if testing.Short() {
		policies, sequences = 30, 10
	}
	total, tight := 0, 0
	for ps := uint64(1); ps <= uint64(policies); ps++ {
		r := rand.New(rand.NewPCG(ps, 0xb0d5))
		p := policytest.Random(r)
		side := newDiffSide(t, p)
		rep := analyze.Analyze(side.c.Policy)
		fail := func(format string, args ...any) {
			raw, _ := json.Marshal(p)
			got, _ := json.Marshal(rep)
			t.Fatalf("policy seed %d: %s\npolicy %s\nanalysis %s", ps, fmt.Sprintf(format, args...), raw, got)
		}
		for s := 0; s < sequences; s++ {
			sr := rand.New(rand.NewPCG(ps, uint64(s)))
			if err := checkWithinBounds(ctx, side, rep, randomOps(sr, 5+sr.IntN(40))); err != nil {
				fail("sequence %d: %v", s, err)
			}
			total++
		}
		// The same policy without constraints (when lists and argument
		// schemas, which only deny): every bound is reached.
		bare := p
		bare.Tools = map[string]policy.ToolRule{}
		for name, rule := range p.Tools {
			rule.When, rule.ArgsSchema = nil, nil
			bare.Tools[name] = rule
		}
		if p.DefaultRule != nil {
			d := *p.DefaultRule
			d.When, d.ArgsSchema = nil, nil
			bare.DefaultRule = &d
		}
		bside := newDiffSide(t, bare)
		brep := analyze.Analyze(bside.c.Policy)
		if err := checkTight(ctx, bside, brep); err != nil {
			raw, _ := json.Marshal(bare)
			got, _ := json.Marshal(brep)
			t.Fatalf("policy seed %d (constraints removed): %v\npolicy %s\nanalysis %s", ps, err, raw, got)
		}
		tight++
	}
	t.Logf("%d policies × %d random sequences = %d sequences within the bounds; %d policies with every bound reached", policies, sequences, total, tight)
}

// checkWithinBounds runs ops on a fresh agent and checks every bound after every step.
func checkWithinBounds(ctx context.Context, side *diffSide, rep analyze.Report, ops []op) error {
	agent, err := side.rt.CreateAgent(ctx, side.c, runtime.CreateOptions{At: Genesis})
	if err != nil {
		return err
	}
	pol := side.c.Policy
	prev, err := side.rt.State(ctx, agent)
	if err != nil {
		return err
	}
	seen := map[uint64]bool{}
	unlisted := int64(0)
	var firstAllowed, spentAll *time.Time
	for i, o := range ops {
		var v lineage.Verdict
		var err error
		switch o.kind {
		case "request":
			v, err = side.rt.Request(ctx, agent, o.req)
		case "approve":
			v, err = side.rt.Approve(ctx, agent, runtime.Approval{RequestID: o.id, By: o.by, At: o.req.At})
		case "reject":
			v, err = side.rt.Reject(ctx, agent, runtime.Approval{RequestID: o.id, By: o.by, At: o.req.At})
		case "terminate":
			_, err = side.rt.Terminate(ctx, agent, runtime.Kill{By: o.by, At: o.req.At})
		}
		if err != nil {
			continue
		}
		st, err := side.rt.State(ctx, agent)
		if err != nil {
			return err
		}
		if st.Spent > rep.MaxSpend {
			return fmt.Errorf("op %d %s: spent %d, analyze said at most %d", i, o, st.Spent, rep.MaxSpend)
		}
		for name, n := range st.Calls {
			if n > prev.Calls[name] {
				if firstAllowed == nil {
					at := o.req.At
					firstAllowed = &at
				}
				if rule, ok := pol.Tools[name]; ok && rule.RequiresApproval && o.kind != "approve" {
					return fmt.Errorf("op %d %s: %s allowed without an approval, analyze said each call needs one", i, o, name)
				}
			}
			t, ok := rep.Tools[name]
			if !ok {
				continue
			}
			if t.MaxCalls != nil && n > *t.MaxCalls {
				return fmt.Errorf("op %d %s: %d calls of %s, analyze said at most %d", i, o, n, name, *t.MaxCalls)
			}
			if credits := n * pol.Tools[name].Cost; credits > t.MaxCredits {
				return fmt.Errorf("op %d %s: %s spent %d credits, analyze said at most %d", i, o, name, credits, t.MaxCredits)
			}
		}
		if v.Reason == "unlisted_tool" && !seen[v.Seq] {
			unlisted++
			if rep.UnlistedAttemptsToTermination == nil {
				return fmt.Errorf("op %d %s: unlisted_tool, but analyze said default_rule admits every name", i, o)
			}
			if n := *rep.UnlistedAttemptsToTermination; unlisted > n || (unlisted == n && st.Status != lineage.Terminated) {
				return fmt.Errorf("op %d %s: unlisted attempt %d (status %s), analyze said attempt %d terminates", i, o, unlisted, st.Status, n)
			}
		}
		seen[v.Seq] = true
		if spentAll == nil && rep.MaxSpend > 0 && st.Spent == rep.MaxSpend {
			at := o.req.At
			spentAll = &at
			if secs := at.Sub(*firstAllowed); secs < time.Duration(*rep.MinSecondsToExhaust)*time.Second {
				return fmt.Errorf("op %d %s: spent %d in %s, analyze said it takes at least %ds", i, o, st.Spent, secs, *rep.MinSecondsToExhaust)
			}
		}
		prev = st
	}
	return nil
}

// step requests tool at t (approving it at once when it is pending) and returns the final verdict.
func step(ctx context.Context, side *diffSide, agent, tool string, at time.Time) (lineage.Verdict, error) {
	v, err := side.rt.Request(ctx, agent, lineage.Request{Tool: tool, At: at})
	if err != nil || v.Decision != lineage.Pending {
		return v, err
	}
	return side.rt.Approve(ctx, agent, runtime.Approval{RequestID: v.RequestID, By: "alice", At: at})
}

// checkTight constructs, for a policy without constraints, sequences that
// reach each bound analyze stated.
func checkTight(ctx context.Context, side *diffSide, rep analyze.Report) error {
	pol := side.c.Policy
	window, perWindow := time.Duration(0), 1<<30
	if rl := pol.RateLimit; rl != nil {
		window, perWindow = time.Duration(rl.WindowSecs)*time.Second, int(rl.MaxActions)
	}
	// Spend: the best set of calls, found by this test's own search, at most
	// max_actions per window from genesis on.
	calls := bestSpend(pol)
	agent, err := side.rt.CreateAgent(ctx, side.c, runtime.CreateOptions{At: Genesis})
	if err != nil {
		return err
	}
	var last time.Duration
	for i, tool := range calls {
		last = time.Duration(i/perWindow) * window
		v, err := step(ctx, side, agent, tool, Genesis.Add(last))
		if err != nil || v.Decision != lineage.Allow {
			return fmt.Errorf("spend: call %d of %v (%s): %+v %v", i, calls, tool, v, err)
		}
	}
	st, err := side.rt.State(ctx, agent)
	if err != nil {
		return err
	}
	if st.Spent != rep.MaxSpend {
		return fmt.Errorf("spend: %v spent %d, analyze said %d", calls, st.Spent, rep.MaxSpend)
	}
	if got := int64(last / time.Second); got != *rep.MinSecondsToExhaust {
		return fmt.Errorf("spend: %v took %ds, analyze said %ds", calls, got, *rep.MinSecondsToExhaust)
	}
	// Per tool: its calls, one per window, until the bound; approvals asked for.
	for name, t := range rep.Tools {
		agent, err := side.rt.CreateAgent(ctx, side.c, runtime.CreateOptions{At: Genesis})
		if err != nil {
			return err
		}
		n := int64(20) // unbounded: twenty calls are all allowed
		if t.MaxCalls != nil {
			n = *t.MaxCalls
		}
		for i := int64(0); i <= n; i++ {
			at := Genesis.Add(time.Duration(i) * max(window, time.Second))
			v, err := side.rt.Request(ctx, agent, lineage.Request{Tool: name, At: at})
			if err != nil {
				return err
			}
			if i == n {
				if t.MaxCalls != nil && v.Decision != lineage.Deny {
					return fmt.Errorf("%s: call %d is %s, analyze said at most %d", name, i+1, v.Decision, n)
				}
				break
			}
			want := lineage.Allow
			if t.RequiresApproval {
				want = lineage.Pending
			}
			if v.Decision != want {
				return fmt.Errorf("%s: call %d is %s (%s), want %s (analyze: %d calls, approval %v)", name, i+1, v.Decision, v.Reason, want, n, t.RequiresApproval)
			}
			if want == lineage.Pending {
				if v, err = side.rt.Approve(ctx, agent, runtime.Approval{RequestID: v.RequestID, By: "alice", At: at}); err != nil || v.Decision != lineage.Allow {
					return fmt.Errorf("%s: approving call %d: %+v %v", name, i+1, v, err)
				}
			}
		}
		st, err := side.rt.State(ctx, agent)
		if err != nil {
			return err
		}
		if credits := st.Calls[name] * pol.Tools[name].Cost; t.MaxCalls != nil && credits != t.MaxCredits {
			return fmt.Errorf("%s: %d calls spent %d, analyze said %d", name, st.Calls[name], credits, t.MaxCredits)
		}
	}
	// Unlisted tools: the stated attempt terminates, not one before.
	if n := rep.UnlistedAttemptsToTermination; n != nil {
		agent, err := side.rt.CreateAgent(ctx, side.c, runtime.CreateOptions{At: Genesis})
		if err != nil {
			return err
		}
		for i := int64(1); i <= *n; i++ {
			v, err := side.rt.Request(ctx, agent, lineage.Request{Tool: "never_listed", At: Genesis.Add(time.Duration(i) * time.Second)})
			if err != nil {
				return err
			}
			if v.Reason != "unlisted_tool" || (v.Terminated != "") != (i == *n) {
				return fmt.Errorf("unlisted attempt %d of %d: %+v", i, *n, v)
			}
		}
	}
	return nil
}

// bestSpend searches every choice of calls (small budgets only) for the
// largest spend, and among those the fewest calls; it returns the calls.
func bestSpend(p policy.Policy) []string {
	type kind struct {
		names []string // default_rule: one name per call of its cap, as many names as needed
		cost  int64
	}
	var kinds []kind
	names := make([]string, 0, len(p.Tools))
	for name := range p.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r := p.Tools[name]
		if r.Cost == 0 || r.Cost > p.Budget {
			continue
		}
		n := p.Budget / r.Cost
		if r.MaxCalls != nil {
			n = min(n, *r.MaxCalls)
		}
		k := kind{cost: r.Cost}
		for range n {
			k.names = append(k.names, name)
		}
		kinds = append(kinds, k)
	}
	if d := p.DefaultRule; d != nil && d.Cost > 0 && d.Cost <= p.Budget {
		k := kind{cost: d.Cost}
		for i := range p.Budget / d.Cost {
			k.names = append(k.names, fmt.Sprintf("unnamed_%d", i)) // one call per name: no cap is met
		}
		kinds = append(kinds, k)
	}
	var best, cur []string
	bestSum, curSum := int64(-1), int64(0)
	var search func(i int)
	search = func(i int) {
		if i == len(kinds) {
			if curSum > bestSum || (curSum == bestSum && len(cur) < len(best)) {
				bestSum, best = curSum, append([]string(nil), cur...)
			}
			return
		}
		k := kinds[i]
		n := len(cur)
		for c := 0; c <= len(k.names) && curSum+int64(c)*k.cost <= p.Budget; c++ {
			if c > 0 {
				cur = append(cur, k.names[c-1])
			}
			curSum += int64(c) * k.cost
			search(i + 1)
			curSum -= int64(c) * k.cost
		}
		cur = cur[:n]
	}
	search(0)
	return best
}

// TestScratchRestore holds runtime.Scratch.Restore (what lineagec explain
// --state uses) to the runtime: an agent driven by a random sequence, and a
// scratch agent restored from its printed state, decide the next request of
// every tool alike.
func TestScratchRestore(t *testing.T) {
	ctx := context.Background()
	policies, sequences := 60, 10
	if testing.Short() {
		policies, sequences = 15, 5
	}
	compared := 0
	for ps := uint64(1); ps <= uint64(policies); ps++ {
		r := rand.New(rand.NewPCG(ps, 0x5c4a7c))
		side := newDiffSide(t, policytest.Random(r))
		for s := 0; s < sequences; s++ {
			sr := rand.New(rand.NewPCG(ps, uint64(s)))
			agent, err := side.rt.CreateAgent(ctx, side.c, runtime.CreateOptions{At: Genesis})
			if err != nil {
				t.Fatal(err)
			}
			last := Genesis
			for _, o := range randomOps(sr, 5+sr.IntN(30)) {
				if o.kind != "request" || o.req.At.Before(last) || o.req.At.Year() > 2100 {
					continue // the approvals are on the agent's own ids; keep it simple
				}
				o.req.ID = ""
				if _, err := side.rt.Request(ctx, agent, o.req); err == nil {
					last = o.req.At
				}
			}
			st, err := side.rt.State(ctx, agent)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(st)
			var printed lineage.State // through JSON, as lineagec state prints it
			if err := json.Unmarshal(raw, &printed); err != nil {
				t.Fatal(err)
			}
			for _, tool := range append([]string{"never_listed"}, policytest.Tools...) {
				at := last.Add(time.Duration(sr.IntN(3000)) * time.Millisecond)
				scratch, err := side.rt.NewScratch(ctx, side.c, "agt_scratch", runtime.ScratchOptions{CreateOptions: runtime.CreateOptions{At: Genesis}})
				if err != nil {
					t.Fatal(err)
				}
				if err := scratch.Restore(printed); err != nil {
					t.Fatal(err)
				}
				args, _ := runtime.CheckArgs([]byte(`{"amount":3}`))
				got, gerr := scratch.Request(ctx, runtime.CanonicalRequest{Tool: tool, Args: args, At: at})
				// The agent decides the same request.
				want, werr := side.rt.Request(ctx, agent, lineage.Request{Tool: tool, Args: map[string]any{"amount": json.Number("3")}, At: at})
				if (gerr == nil) != (werr == nil) || got.Decision != want.Decision || got.Reason != want.Reason ||
					got.Cost != want.Cost || got.Terminated != want.Terminated || (got.Scar == nil) != (want.Scar == nil) {
					t.Fatalf("policy seed %d sequence %d, %s at %s:\n  restored %+v %v\n  agent    %+v %v\n  state %s",
						ps, s, tool, at.Sub(Genesis), got, gerr, want, werr, raw)
				}
				compared++
				// Undo: the agent has decided this request; compare the next
				// tool against the state it has now.
				if st, err = side.rt.State(ctx, agent); err != nil {
					t.Fatal(err)
				}
				raw, _ = json.Marshal(st)
				printed = lineage.State{}
				if err := json.Unmarshal(raw, &printed); err != nil {
					t.Fatal(err)
				}
				last = at
			}
		}
	}
	t.Logf("%d requests decided alike by an agent and a scratch agent restored from its state", compared)
}
