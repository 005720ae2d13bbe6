package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/cache"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	lineagerego "github.com/lineage-guard/lineage/rego"
)

// engine is one compiled policy's prepared OPA query, shared by every agent
// with that policy (keyed by digest).
type engine struct {
	compiled *policy.Compiled
	query    rego.PreparedEvalQuery // the verdict of a request or an approval
	reject   rego.PreparedEvalQuery // the verdict of a rejection
	// evalOptions are the options of every evaluation but the input.
	evalOptions []rego.EvalOption
	// reads: the parts of the input beyond the verdict's own that the
	// policy's CEL constraints and extensions read; only those are built.
	reads policy.InputReads
	// rules and defaultRule are input.rule for each tool (policies with
	// extensions only): parsed once, shared by every input.
	rules       map[string]*ast.Term
	defaultRule *ast.Term
	// tools are the policy's tool names as Rego strings, made once, and
	// requests the {"tool": name} objects of the trimmed input.
	tools    map[string]*ast.Term
	requests map[string]*ast.Term
	// deadline bounds every evaluation (Options.EvalDeadline).
	deadline time.Duration
}

// DefaultEvalDeadline is the deadline of an evaluation when
// Options.EvalDeadline is zero (docs/extensions.md).
const DefaultEvalDeadline = 100 * time.Millisecond

// extensionFailure is the verdict of a policy whose Rego extension failed at
// run time: a builtin error (to_number("abc")), a conflict, an evaluation
// over the deadline (docs/extensions.md). It is a denial without a scar, recorded like
// any other; the agent's input can make an extension fail, never allow.
var extensionFailure = decision{decision: lineage.Deny, reason: "extension_error"}

// noCache is an OPA virtual cache that keeps nothing. The generated Rego
// reads each rule at most once per evaluation (its constants aside), so the
// default cache, made anew for every evaluation, only cost: a third of the
// allocations of an evaluation of the invoice policy. Extensions are user
// Rego that may read a rule in a loop; their policies keep OPA's cache.
type noCache struct{}

func (noCache) Push()                         {}
func (noCache) Pop()                          {}
func (noCache) Get(ast.Ref) (*ast.Term, bool) { return nil, false }
func (noCache) Put(ast.Ref, *ast.Term)        {}
func (noCache) Keys() []ast.Ref               { return nil }

// EvalOptions are the options, but the input, with which the runtime
// evaluates a compiled policy's queries: no metrics; an external Cancel that
// is never fired (it stops OPA from starting a goroutine per evaluation to
// watch the context); and, for a policy without extensions, no virtual
// cache; and, for a policy with argument schemas, one inter-query value
// cache, where json.match_schema keeps each schema compiled (else it
// compiles it on every evaluation). Benchmarks use them for OPA's floor.
func EvalOptions(c *policy.Compiled) []rego.EvalOption {
	opts := []rego.EvalOption{rego.EvalMetrics(metrics.NoOp()), rego.EvalExternalCancel(topdown.NewCancel())}
	if !c.Reads.All {
		opts = append(opts, rego.EvalVirtualCache(noCache{}))
	}
	if n := argsSchemas(c.Policy); n > 0 {
		// Bounded: the policy's schemas are constants of its module; what
		// else OPA keeps there (an extension's compiled regular
		// expressions) is evicted beyond the bound.
		limit := 2*n + 64
		opts = append(opts, rego.EvalInterQueryBuiltinValueCache(cache.NewInterQueryValueCache(context.Background(),
			&cache.Config{InterQueryBuiltinValueCache: cache.InterQueryBuiltinValueCacheConfig{MaxNumEntries: &limit}})))
	}
	return opts
}

// argsSchemas counts a policy's argument schemas (docs/policy.md#argument-schemas).
func argsSchemas(p policy.Policy) int {
	n := 0
	for _, r := range p.Tools {
		if r.ArgsSchema != nil {
			n++
		}
	}
	if p.DefaultRule != nil && p.DefaultRule.ArgsSchema != nil {
		n++
	}
	return n
}

// PrepareQuery prepares one of a compiled policy's queries (c.Query or
// c.RejectQuery) exactly as the runtime evaluates it: its modules and builtins,
// Rego v1, and results left as ast terms (no conversion to Go values); OPA
// given only the builtins lineage allows (lineagerego.Capabilities: the
// compiler checked this already, the runtime does not rely on it), and
// builtin errors made errors instead of undefined (so that an extension
// fails closed). The modules are compiled once: c.Compiler when the compiler
// made one (its check ran with the same capabilities). Benchmarks use it for
// OPA's floor.
func PrepareQuery(ctx context.Context, c *policy.Compiled, query string) (rego.PreparedEvalQuery, error) {
	opts := []func(*rego.Rego){
		rego.Query(query),
		rego.SetRegoVersion(ast.RegoV1),
		rego.Capabilities(lineagerego.WithArgsSchemas(lineagerego.Capabilities())),
		rego.StrictBuiltinErrors(true),
		rego.GenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }),
	}
	if c.Compiler != nil {
		opts = append(opts, rego.Compiler(c.Compiler)) // compiled by the compiler's check (D61: compiled once)
	} else {
		for _, m := range c.Modules {
			opts = append(opts, rego.Module(m.Name, m.Source))
		}
	}
	opts = append(opts, c.Options...)
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return pq, fmt.Errorf("preparing policy %s: %w", c.Digest, err)
	}
	return pq, nil
}

// newEngine prepares a compiled policy's queries; deadline bounds each
// evaluation (zero: DefaultEvalDeadline).
func newEngine(ctx context.Context, c *policy.Compiled, deadline time.Duration) (*engine, error) {
	if deadline <= 0 {
		deadline = DefaultEvalDeadline
	}
	pq, err := PrepareQuery(ctx, c, c.Query)
	if err != nil {
		return nil, err
	}
	reject, err := PrepareQuery(ctx, c, c.RejectQuery)
	if err != nil {
		return nil, err
	}
	e := &engine{compiled: c, query: pq, reject: reject, evalOptions: EvalOptions(c),
		reads: c.Reads, deadline: deadline, tools: make(map[string]*ast.Term, len(c.Policy.Tools)), requests: make(map[string]*ast.Term, len(c.Policy.Tools))}
	for name := range c.Policy.Tools {
		e.tools[name] = ast.StringTerm(name)
		e.requests[name] = ast.NewTerm(ast.NewObject(ast.Item(kTool, e.tools[name])))
	}
	if len(c.Rules) > 0 || c.DefaultRule != nil {
		e.rules = make(map[string]*ast.Term, len(c.Rules))
		for name, raw := range c.Rules {
			if e.rules[name], err = ast.ParseTerm(string(raw)); err != nil {
				return nil, fmt.Errorf("policy %s: rule of %s: %w", c.Digest, name, err)
			}
		}
		if c.DefaultRule != nil {
			if e.defaultRule, err = ast.ParseTerm(string(c.DefaultRule)); err != nil {
				return nil, fmt.Errorf("policy %s: default rule: %w", c.Digest, err)
			}
		}
	}
	return e, nil
}

// rule is input.rule for a tool: its rule, the default rule for an unlisted
// tool, nil if there is none (or the policy has no extensions).
func (e *engine) rule(tool string) *ast.Term {
	if r, ok := e.rules[tool]; ok {
		return r
	}
	return e.defaultRule
}

// decision is the Rego verdict object, mapped without further rule logic.
type decision struct {
	decision   lineage.Decision
	reason     string
	cost       int64
	scar       lineage.Severity // "" for none
	weight     int64
	terminated lineage.Termination
}

type mode string

const (
	modeRequest mode = "request"
	modeApprove mode = "approve"
	modeReject  mode = "reject"
)

var (
	kMode, kRequest, kState, kRateKth = ast.InternedTerm("mode"), ast.InternedTerm("request"), ast.InternedTerm("state"), ast.InternedTerm("rate_kth_age_ns")
	kPendingCount                     = ast.InternedTerm("pending_count")
	kID, kTool, kArgs, kAt, kAtNs     = ast.InternedTerm("id"), ast.InternedTerm("tool"), ast.InternedTerm("args"), ast.InternedTerm("at"), ast.InternedTerm("at_ns")
	kBudget, kSpent, kRemaining       = ast.InternedTerm("budget"), ast.InternedTerm("spent"), ast.InternedTerm("remaining")
	kScarScore, kCalls, kToolCalls    = ast.InternedTerm("scar_score"), ast.InternedTerm("calls"), ast.InternedTerm("tool_calls")
	kDecision, kReason, kCost, kScar  = ast.InternedTerm("decision"), ast.InternedTerm("reason"), ast.InternedTerm("cost"), ast.InternedTerm("scar")
	kWeight, kTerminated, kRule       = ast.InternedTerm("weight"), ast.InternedTerm("terminated"), ast.InternedTerm("rule")
)

// modeTerms are the values of input.mode, made once.
var modeTerms = map[mode]*ast.Term{
	modeRequest: ast.StringTerm(string(modeRequest)),
	modeApprove: ast.StringTerm(string(modeApprove)),
	modeReject:  ast.StringTerm(string(modeReject)),
}

// toolTerm is a tool name as a Rego string: made once for the policy's tools.
func (e *engine) toolTerm(tool string) *ast.Term {
	if t, ok := e.tools[tool]; ok {
		return t
	}
	return ast.StringTerm(tool)
}

// input builds the query input as an ast.Value directly (docs/policy.md#cel-constraints, docs/extensions.md plus the
// rate-limit figure), so OPA need not convert Go values. Each object is made
// by one ast.NewObject call with all its members: inserting them one by one
// costs an allocation per member and regrows the object.
func (e *engine) input(m mode, id, tool string, cr *checkedRequest, at time.Time, f *folded, kept *keptTerms) (ast.Value, error) {
	var members [6][2]*ast.Term
	top := append(members[:0], ast.Item(kMode, modeTerms[m]), ast.Item(kPendingCount, ast.InternedTerm(len(f.pending))))
	if kth, ok := f.rateKth(); ok {
		top = append(top, ast.Item(kRateKth, ast.IntNumberTerm(int(at.UnixNano()-kth))))
	}
	toolTerm := e.toolTerm(tool)
	var request *ast.Term
	switch {
	case e.reads.All:
		args, err := cr.value()
		if err != nil {
			return nil, err
		}
		request = ast.NewTerm(ast.NewObject(
			ast.Item(kID, ast.StringTerm(id)),
			ast.Item(kTool, toolTerm),
			ast.Item(kArgs, ast.NewTerm(args)),
			ast.Item(kAt, ast.StringTerm(at.UTC().Format(time.RFC3339Nano))),
			ast.Item(kAtNs, ast.IntNumberTerm(int(at.UnixNano()))),
		))
	case e.reads.Args:
		args, err := cr.value()
		if err != nil {
			return nil, err
		}
		request = ast.NewTerm(ast.NewObject(
			ast.Item(kTool, toolTerm),
			ast.Item(kArgs, ast.NewTerm(args)),
			ast.Item(kAtNs, ast.IntNumberTerm(int(at.UnixNano()))),
		))
	default:
		var ok bool
		if request, ok = e.requests[tool]; !ok {
			request = ast.NewTerm(ast.NewObject(ast.Item(kTool, toolTerm)))
		}
	}
	var stateMembers [6][2]*ast.Term
	state := append(stateMembers[:0],
		ast.Item(kRemaining, kept.remaining.of(f.budget-f.spent)),
		ast.Item(kScarScore, ast.IntNumberTerm(int(f.scarScore))),
		ast.Item(kToolCalls, ast.IntNumberTerm(int(f.calls[tool]))),
	)
	if e.reads.All || e.reads.State {
		calls := make([][2]*ast.Term, 0, len(f.calls))
		for name, n := range f.calls {
			calls = append(calls, ast.Item(e.toolTerm(name), ast.IntNumberTerm(int(n))))
		}
		state = append(state,
			ast.Item(kBudget, kept.budget.of(f.budget)),
			ast.Item(kSpent, kept.spent.of(f.spent)),
			ast.Item(kCalls, ast.NewTerm(ast.NewObject(calls...))),
		)
	}
	top = append(top, ast.Item(kRequest, request), ast.Item(kState, ast.NewTerm(ast.NewObject(state...))))
	if e.reads.All {
		if r := e.rule(tool); r != nil {
			top = append(top, ast.Item(kRule, r))
		}
	}
	return ast.NewObject(top...), nil
}

// keptTerms are the numbers of an agent's input that most decisions leave
// as they were, kept as Rego terms from one decision to the next (terms are
// values: an input may share them): the budget never changes, the spent and
// remaining budget only with a cost, and a number beyond OPA's interned ones
// costs a term and its text.
type keptTerms struct {
	remaining, budget, spent keptNumber
}

// keptNumber is one number and its term, made anew when the number changes.
type keptNumber struct {
	n int64
	t *ast.Term
}

func (k *keptNumber) of(n int64) *ast.Term {
	if k.t == nil || k.n != n {
		k.n, k.t = n, ast.IntNumberTerm(int(n))
	}
	return k.t
}

// decide evaluates the policy for one input, within the deadline. For a
// policy with extensions, an evaluation that fails (a builtin error, a
// conflict, the deadline) is the extension's failure: its verdict is
// extensionFailure. Without extensions only the generated Rego runs, and a
// failure is an error of ours (nothing is recorded).
func (e *engine) decide(ctx context.Context, m mode, in ast.Value) (decision, error) {
	q := e.query
	if m == modeReject {
		q = e.reject
	}
	rs, err := e.eval(ctx, q, in)
	var te *topdown.Error
	if err != nil && errors.As(err, &te) && te.Code == topdown.CancelErr {
		// A machine that stalls the process (load, a pause) can make a short
		// evaluation overrun: the evaluation is pure, so it runs once more.
		// Rego that does too much work overruns again (D34: the evaluation deadline).
		rs, err = e.eval(ctx, q, in)
	}
	if err != nil {
		if !errors.As(err, &te) {
			return decision{}, fmt.Errorf("evaluating policy %s: %w", e.compiled.Digest, err)
		}
		if e.reads.All {
			return extensionFailure, nil
		}
		if te.Code == topdown.CancelErr {
			return decision{}, fmt.Errorf("evaluating policy %s: over the deadline of %v twice: %w", e.compiled.Digest, e.deadline, err)
		}
		return decision{}, fmt.Errorf("evaluating policy %s: %w", e.compiled.Digest, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return decision{}, fmt.Errorf("policy %s produced no verdict", e.compiled.Digest)
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return decision{}, fmt.Errorf("policy %s: unexpected result %T", e.compiled.Digest, rs[0].Expressions[0].Value)
	}
	return mapVerdict(t)
}

// eval evaluates q for one input within the deadline: OPA asks the cancel
// before each expression it evaluates, and the cancel reads the clock
// (deadlineCancel); no goroutine per evaluation, unlike a context deadline,
// and no timer.
func (e *engine) eval(ctx context.Context, q rego.PreparedEvalQuery, in ast.Value) (rego.ResultSet, error) {
	cancel := &deadlineCancel{deadline: time.Now().Add(e.deadline)}
	var opts [6]rego.EvalOption
	return q.Eval(ctx, append(append(opts[:0], e.evalOptions...), rego.EvalExternalCancel(cancel), rego.EvalParsedInput(in))...)
}

// deadlineCancel is one evaluation's topdown.Cancel, by D411 (the evaluation
// deadline read from the clock): it says cancelled once the deadline has
// passed, reading the (monotonic) clock at every cancelCheckEvery-th
// question. OPA asks from the evaluating goroutine only, before each
// expression it evaluates and within the loops of builtins that can run
// long (numbers.range), so an evaluation over the deadline stops within
// cancelCheckEvery questions of it, where it stopped at the next question
// after a timer fired. It saves each evaluation a timer's start and stop (a
// heap timer and an allocation): an evaluation of the generated Rego asks
// about four times, and so never reads the clock.
type deadlineCancel struct {
	deadline time.Time
	asked    uint32
	done     atomic.Bool
}

// cancelCheckEvery is how many of OPA's questions share one reading of the
// clock.
const cancelCheckEvery = 16

func (c *deadlineCancel) Cancel() { c.done.Store(true) }

func (c *deadlineCancel) Cancelled() bool {
	if c.done.Load() {
		return true
	}
	if c.asked++; c.asked%cancelCheckEvery != 0 || time.Now().Before(c.deadline) {
		return false
	}
	c.done.Store(true)
	return true
}

func mapVerdict(t *ast.Term) (decision, error) {
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return decision{}, fmt.Errorf("verdict is not an object: %v", t)
	}
	var d decision
	str := func(k *ast.Term) string {
		if v := obj.Get(k); v != nil {
			if s, ok := v.Value.(ast.String); ok {
				return string(s)
			}
		}
		return ""
	}
	num := func(k *ast.Term) int64 {
		if v := obj.Get(k); v != nil {
			if n, ok := v.Value.(ast.Number); ok {
				if i, ok := n.Int64(); ok {
					return i
				}
			}
		}
		return 0
	}
	d.decision = lineage.Decision(str(kDecision))
	d.reason = str(kReason)
	d.cost = num(kCost)
	if s := str(kScar); s != "none" {
		d.scar = lineage.Severity(s)
	}
	d.weight = num(kWeight)
	d.terminated = lineage.Termination(str(kTerminated))
	switch d.decision {
	case lineage.Allow, lineage.Deny, lineage.Pending:
	default:
		return decision{}, fmt.Errorf("verdict has no valid decision: %v", t)
	}
	if d.reason == "" {
		return decision{}, fmt.Errorf("verdict has no reason: %v", t)
	}
	return d, nil
}
