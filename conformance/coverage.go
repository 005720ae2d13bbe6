package conformance

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
)

// Coverage is what `lineagec test --coverage` reports (docs/cases.md#coverage):
// for every policy the cases ran against, the outcomes its cases reached.
type Coverage struct {
	Percent  float64          `json:"percent"`
	Policies []PolicyCoverage `json:"policies"`
}

// PolicyCoverage is the coverage of one policy (a file's policy, or a
// case's own), named by the file and line where it is written.
type PolicyCoverage struct {
	File      string      `json:"file"`
	Percent   float64     `json:"percent"`
	Uncovered []Uncovered `json:"uncovered"`

	line    int // where the policy starts, for the text line
	reached int
	total   int
}

// Uncovered is one outcome no case reached, where the policy says it.
type Uncovered struct {
	What string `json:"what"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// outcome is one thing a policy's cases can reach.
type outcome struct {
	what    string
	pos     diag.Position
	reached bool
}

// policyCoverage collects the outcomes of one policy over every case using it.
type policyCoverage struct {
	file     string
	line     int
	compiled *policy.Compiled
	doc      *source.Document
	outcomes []*outcome
	byKey    map[string][]*outcome // "rule\x00kind" → outcomes; kind "when:<reason>" for constraints
	inputs   []ast.Value           // the verdict query's inputs, for the extensions' line coverage
}

// coverageSink is the collector of one run; nil when coverage is off.
type coverageSink struct {
	order    []string
	policies map[string]*policyCoverage
}

func newCoverageSink() *coverageSink {
	return &coverageSink{policies: map[string]*policyCoverage{}}
}

// policy returns the collector of a case's policy, made at its first case.
func (s *coverageSink) policy(c *Case, compiled *policy.Compiled) *policyCoverage {
	doc := c.File.doc.Sub(c.policyPtr)
	key := c.File.Path + "\x00" + c.policyPtr
	if c.policyPtr != "/policy" {
		key = c.File.Path + "\x00" + compiled.Digest // equal policies of one file count as one
	}
	if pc := s.policies[key]; pc != nil {
		return pc
	}
	pc := &policyCoverage{file: c.File.Path, line: doc.Pos("").Line, compiled: compiled, doc: doc, byKey: map[string][]*outcome{}}
	pc.listOutcomes()
	s.order = append(s.order, key)
	s.policies[key] = pc
	return pc
}

func (pc *policyCoverage) add(key, what, ptr string) {
	o := &outcome{what: what, pos: pc.doc.Pos(ptr)}
	pc.outcomes = append(pc.outcomes, o)
	pc.byKey[key] = append(pc.byKey[key], o)
}

// listOutcomes lists what the policy's cases can reach (docs/cases.md#coverage).
func (pc *policyCoverage) listOutcomes() {
	p := pc.compiled.Policy
	names := make([]string, 0, len(p.Tools))
	for name := range p.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	rule := func(label string, r policy.ToolRule, ptr ...string) {
		at := func(more ...string) string { return diag.Pointer(append(append([]string{}, ptr...), more...)...) }
		pc.add(label+"\x00allow", label+": allow", at())
		if r.RequiresApproval {
			pc.add(label+"\x00pending", label+": pending", at("requires_approval"))
		}
		if len(r.ArgsSchema) > 0 {
			pc.add(label+"\x00invalid_args", label+": args_schema fails (invalid_args)", at("args_schema"))
		}
		for i, c := range r.When {
			pc.add(label+"\x00when:"+c.Reason, fmt.Sprintf("%s: when[%d] fails (%s)", label, i, c.Reason), at("when", fmt.Sprint(i), "expr"))
		}
		if r.MaxCalls != nil {
			pc.add(label+"\x00max_calls_exceeded", label+": max_calls_exceeded", at("max_calls"))
		}
		if r.Cost > 0 {
			pc.add(label+"\x00insufficient_budget", label+": insufficient_budget", at("cost"))
		}
	}
	for _, name := range names {
		rule("tools."+name, p.Tools[name], "tools", name)
	}
	if p.DefaultRule != nil {
		rule("default_rule", *p.DefaultRule, "default_rule")
	} else {
		pc.add("\x00unlisted_tool", "unlisted_tool", "/tools")
	}
	if p.RateLimit != nil {
		pc.add("\x00rate_limited", "rate_limited", "/rate_limit")
	}
	if p.Budget > 0 {
		pc.add("\x00budget_exhausted", "terminated: budget_exhausted", "/budget")
	}
	pc.add("\x00scar_limit_reached", "terminated: scar_limit_reached", "/scar_limit")
}

// reach marks what a verdict reached; tool is the request's tool.
func (pc *policyCoverage) reach(tool string, v lineage.Verdict) {
	mark := func(key string) {
		for _, o := range pc.byKey[key] {
			o.reached = true
		}
	}
	label := "tools." + tool
	if _, ok := pc.compiled.Policy.Tools[tool]; !ok {
		label = "default_rule"
	}
	switch {
	case v.Decision == lineage.Allow:
		mark(label + "\x00allow")
	case v.Decision == lineage.Pending:
		mark(label + "\x00pending")
	case v.Reason == "unlisted_tool", v.Reason == "rate_limited":
		mark("\x00" + v.Reason)
	case v.Reason == "max_calls_exceeded", v.Reason == "insufficient_budget":
		mark(label + "\x00" + v.Reason)
	case v.Reason == "invalid_args":
		// The args_schema's denial; a when constraint may have chosen the
		// same reason, and stands for it too (D314: a reason stands for the constraints that give it).
		mark(label + "\x00invalid_args")
		mark(label + "\x00when:" + v.Reason)
	default:
		// A constraint's reason: every constraint of the rule with that reason
		// (D314 (a reason stands for the constraints that give it)).
		mark(label + "\x00when:" + v.Reason)
	}
	if v.Terminated == lineage.BudgetExhausted || v.Terminated == lineage.ScarLimitReached {
		mark("\x00" + string(v.Terminated))
	}
}

// extensionLines adds each line of each extension that OPA's coverage counts:
// the recorded inputs are evaluated again with a coverage tracer, on a query
// prepared as the runtime prepares it (the runtime's own evaluations stay
// untraced).
func (pc *policyCoverage) extensionLines(ctx context.Context) error {
	c := pc.compiled
	if len(c.Policy.Rego) == 0 {
		return nil
	}
	q, err := runtime.PrepareQuery(ctx, c, c.Query)
	if err != nil {
		return err
	}
	cov := cover.New()
	for _, in := range pc.inputs {
		if _, err := q.Eval(ctx, rego.EvalParsedInput(in), rego.EvalQueryTracer(cov)); err != nil {
			continue // an extension error is a verdict the case already saw
		}
	}
	// Each extension under the file name its locations carry: the path it
	// was read from, or ext/<i>.rego for a source in the policy.
	modules := map[string]*ast.Module{}
	names := map[string]int{}
	all := compilerModules(c)
	for i := range c.Policy.Rego {
		m := all[fmt.Sprintf("ext/%d.rego", i)]
		if m == nil || m.Package == nil || m.Package.Location == nil {
			continue
		}
		modules[m.Package.Location.File] = m
		names[m.Package.Location.File] = i
	}
	rep := cov.Report(modules)
	files := make([]string, 0, len(rep.Files))
	for f := range rep.Files {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		fr := rep.Files[f]
		i, ok := names[f]
		if !ok {
			continue // the library and the generated policy
		}
		rows := map[int]bool{}
		for _, r := range fr.Covered {
			for row := r.Start.Row; row <= r.End.Row; row++ {
				rows[row] = true
			}
		}
		var all []int
		seen := map[int]bool{}
		for _, rs := range [][]cover.Range{fr.Covered, fr.NotCovered} {
			for _, r := range rs {
				for row := r.Start.Row; row <= r.End.Row; row++ {
					if !seen[row] {
						seen[row] = true
						all = append(all, row)
					}
				}
			}
		}
		sort.Ints(all)
		for _, row := range all {
			o := &outcome{what: fmt.Sprintf("rego[%d] line %d", i, row), pos: pc.regoPos(i, f, row), reached: rows[row]}
			pc.outcomes = append(pc.outcomes, o)
		}
	}
	return nil
}

// compilerModules are the modules of the compiled policy, by name.
func compilerModules(c *policy.Compiled) map[string]*ast.Module {
	if c.Compiler != nil {
		return c.Compiler.Modules
	}
	out := map[string]*ast.Module{}
	for _, m := range c.Modules {
		if mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1}); err == nil {
			out[m.Name] = mod
		}
	}
	return out
}

// regoPos is where line row of extension i is: in its file when it was read
// from a path, else in the policy's source block.
func (pc *policyCoverage) regoPos(i int, module string, row int) diag.Position {
	if !strings.HasPrefix(module, "ext/") {
		return diag.Position{File: module, Line: row}
	}
	pos, _ := pc.doc.TextPos(diag.Pointer("rego", fmt.Sprint(i), "source"))
	if pos.Line > 0 {
		pos.Line += row - 1
	}
	pos.Col = 0
	return pos
}

// report makes the coverage of every policy, in the order first used.
func (s *coverageSink) report(ctx context.Context) (*Coverage, error) {
	out := &Coverage{Policies: []PolicyCoverage{}}
	reached, total := 0, 0
	for _, key := range s.order {
		pc := s.policies[key]
		if err := pc.extensionLines(ctx); err != nil {
			return nil, err
		}
		r := PolicyCoverage{File: pc.file, line: pc.line, Uncovered: []Uncovered{}}
		for _, o := range pc.outcomes {
			r.total++
			if o.reached {
				r.reached++
				continue
			}
			file := o.pos.File
			if file == "" {
				file = pc.file
			}
			r.Uncovered = append(r.Uncovered, Uncovered{What: o.what, File: file, Line: o.pos.Line})
		}
		r.Percent = percent(r.reached, r.total)
		reached += r.reached
		total += r.total
		out.Policies = append(out.Policies, r)
	}
	out.Percent = percent(reached, total)
	return out, nil
}

// percent rounds down to one decimal, so that 99.96 is not shown as 100.
func percent(n, of int) float64 {
	if of == 0 {
		return 100
	}
	return float64(n*1000/of) / 10
}

// WriteText prints one line per policy with its percentage, then every
// outcome not reached with its file:line.
func (c *Coverage) WriteText(w io.Writer) {
	for _, p := range c.Policies {
		fmt.Fprintf(w, "coverage %s:%d: %.1f%% (%d of %d outcomes)\n", p.File, p.line, p.Percent, p.reached, p.total)
		for _, u := range p.Uncovered {
			fmt.Fprintf(w, "  %s:%d: not reached: %s\n", u.File, u.Line, u.What)
		}
	}
	fmt.Fprintf(w, "coverage: %.1f%%\n", c.Percent)
}

// toolOf is the tool a step asks for: the request's, or the pending
// request's that an approval or rejection decides ("" with coverage off).
func (pc *policyCoverage) toolOf(ctx context.Context, rt *runtime.Runtime, agent string, s Step) string {
	if pc == nil {
		return ""
	}
	switch {
	case s.Request != nil:
		tool, _ := s.Request.Tool.(string)
		return tool
	case s.Approve != nil, s.Reject != nil:
		a := s.Approve
		if a == nil {
			a = s.Reject
		}
		if st, err := rt.State(ctx, agent); err == nil {
			return st.Pending[a.Request].Tool
		}
	}
	return ""
}
