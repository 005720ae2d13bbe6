package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/canon"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

type explainParams struct {
	policy string
	state  string
	format string
}

func newExplainCmd(g *globalParams) *cobra.Command {
	var p explainParams
	cmd := &cobra.Command{
		Use:   "explain --policy FILE [--state STATE.json] REQUEST.json",
		Short: "Show which step of the decision order decides a request, and where",
		Long: `Explain decides one request (a JSON object {id?, tool, args?, at?}) under a
policy, on a scratch agent through the same engine as every agent, and records
nothing. It prints the steps of the decision order (docs/decision-order.md) as
they were evaluated, the one that decided, and the policy source position
(file:line:col) of the rule, constraint or extension that decided.
--state starts the agent in a state as "lineagec state" prints it (default: a
fresh agent). --format json prints {verdict, steps: [{step, result}],
decided_by: {step, file, line, column, expr?, rule?}}.
` + exitCodesHelp + `
explain exits like request: 0 allow, 2 deny, 3 pending, 1 error.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExplain(cmd.Context(), p, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.policy, "policy", "", "the policy file (JSON or YAML)")
	cmd.Flags().StringVar(&p.state, "state", "", "the agent's state as `lineagec state` prints it (default: a fresh agent)")
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	_ = cmd.MarkFlagRequired("policy")
	return cmd
}

// Explanation is the output of explain (docs/authoring.md#explain).
type Explanation struct {
	Verdict   lineage.Verdict `json:"verdict"`
	Steps     []ExplainStep   `json:"steps"`
	DecidedBy DecidedBy       `json:"decided_by"`
}

// ExplainStep is one step of the decision order as evaluated.
type ExplainStep struct {
	Step   int    `json:"step"`
	Name   string `json:"name"`
	Result string `json:"result"` // pass, or the decision of the deciding step
	Detail string `json:"detail,omitempty"`
}

// DecidedBy is the step that decided and where the policy says it.
type DecidedBy struct {
	Step   int    `json:"step"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	Expr   string `json:"expr,omitempty"`
	Rule   string `json:"rule,omitempty"`
}

var stepNames = []string{"", "retry", "terminated", "rule", "rate_limit", "max_calls", "constraints", "budget", "approval", "allow"}

func runExplain(ctx context.Context, p explainParams, reqFile string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	r := compileFile(p.policy)
	if !r.Valid {
		return invalidPolicy(r, stderr)
	}
	data, err := os.ReadFile(p.policy)
	if err != nil {
		return err
	}
	doc, diags := source.Load(p.policy, data)
	if len(diags) > 0 {
		return diags
	}
	raw, err := os.ReadFile(reqFile)
	if err != nil {
		return err
	}
	req, err := runtime.DecodeRequest(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", reqFile, err)
	}
	var st *lineage.State
	if p.state != "" {
		b, err := os.ReadFile(p.state)
		if err != nil {
			return err
		}
		st = new(lineage.State)
		if err := json.Unmarshal(b, st); err != nil {
			return fmt.Errorf("--state %s: %w", p.state, err)
		}
	}
	ex, err := explain(ctx, r.compiled, doc, req, st)
	if err != nil {
		return err
	}
	if p.format == formatJSON {
		if err := writeJSONIndent(stdout, ex); err != nil {
			return err
		}
	} else {
		writeExplanation(stdout, req, ex)
	}
	return verdictExit(ex.Verdict)
}

// explain decides req on a scratch agent (the runtime's engine: the decision
// is OPA's) and derives the steps from the verdict, the state and the policy.
func explain(ctx context.Context, c *policy.Compiled, doc *source.Document, req lineage.Request, st *lineage.State) (*Explanation, error) {
	rt := runtime.Open(memory.New(), runtime.Options{})
	start := req.At
	if start.IsZero() {
		start = time.Now().UTC()
		req.At = start
	}
	if st != nil {
		for _, w := range st.Window {
			if w.Before(start) {
				start = w.Time
			}
		}
	}
	s, err := rt.NewScratch(ctx, c, "agt_explain", runtime.ScratchOptions{CreateOptions: runtime.CreateOptions{At: start}})
	if err != nil {
		return nil, err
	}
	if st != nil {
		if err := s.Restore(*st); err != nil {
			return nil, err
		}
	}
	var argsJSON []byte
	if req.Args != nil {
		b, err := json.Marshal(req.Args)
		if err != nil {
			return nil, err
		}
		if argsJSON, err = canon.Transform(b); err != nil {
			return nil, err
		}
	}
	args, err := runtime.CheckArgs(argsJSON)
	if err != nil {
		return nil, err
	}
	v, err := s.Request(ctx, runtime.CanonicalRequest{ID: req.ID, Tool: req.Tool, Args: args, At: req.At})
	if err != nil {
		return nil, err
	}
	return describe(c.Policy, doc, req.Tool, v, st, false), nil
}

// decidingStep is the step of the decision order a verdict's reason names.
func decidingStep(v lineage.Verdict) int {
	switch {
	case v.Decision == lineage.Allow:
		return 9
	case v.Decision == lineage.Pending, v.Reason == "too_many_pending":
		return 8
	}
	switch v.Reason {
	case "terminated":
		return 2
	case "unlisted_tool":
		return 3
	case "rate_limited":
		return 4
	case "max_calls_exceeded":
		return 5
	case "insufficient_budget":
		return 7
	}
	return 6 // a constraint's reason, an extension's, invalid_args, extension_error
}

// describe derives the steps; retry says the verdict is a recorded one given
// again (request --explain of an earlier id).
func describe(p policy.Policy, doc *source.Document, tool string, v lineage.Verdict, st *lineage.State, retry bool) *Explanation {
	ex := &Explanation{Verdict: v}
	decided := decidingStep(v)
	if retry {
		// A recorded verdict given again: a retry of an earlier id (request --explain).
		ex.Steps = []ExplainStep{{Step: 1, Name: stepNames[1], Result: string(v.Decision), Detail: "a retry of request " + v.RequestID + ": its recorded verdict"}}
		pos := doc.Pos("")
		ex.DecidedBy = DecidedBy{Step: 1, File: doc.File, Line: pos.Line, Column: pos.Col}
		return ex
	}
	rule, ok := p.Tools[tool]
	label, ptr := "tools."+tool, []string{"tools", tool}
	if !ok && p.DefaultRule != nil {
		rule, ok = *p.DefaultRule, true
		label, ptr = "default_rule", []string{"default_rule"}
	}
	detail := map[int]string{
		1: "no earlier request of this agent has this id",
		2: "the agent is alive",
		3: "the rule is " + label,
		4: "no rate limit",
		5: "no max_calls",
		6: fmt.Sprintf("%d constraints and the extensions' denials hold", len(rule.When)),
		7: fmt.Sprintf("cost %d is within the remaining budget", rule.Cost),
		8: "the call needs no approval",
	}
	if p.RateLimit != nil {
		detail[4] = fmt.Sprintf("fewer than %d allowed actions in the last %ds", p.RateLimit.MaxActions, p.RateLimit.WindowSecs)
	}
	if rule.MaxCalls != nil {
		n := int64(0)
		if st != nil {
			n = st.Calls[tool]
		}
		detail[5] = fmt.Sprintf("%d of %d calls", n, *rule.MaxCalls)
	}
	if decided == 2 && st != nil && st.Status == lineage.Terminated {
		detail[2] = "the agent is terminated (" + string(st.Termination) + ")"
	}
	for step := 1; step <= decided; step++ {
		s := ExplainStep{Step: step, Name: stepNames[step], Result: "pass", Detail: detail[step]}
		if step == decided {
			s.Result = string(v.Decision)
			s.Detail = v.Reason
			if step == 3 {
				s.Detail = "no rule for " + tool + " and no default_rule"
			}
		}
		ex.Steps = append(ex.Steps, s)
	}
	at := func(tokens ...string) diag.Position { return doc.Pos(diag.Pointer(tokens...)) }
	by := DecidedBy{Step: decided}
	var pos diag.Position
	sub := func(more ...string) []string { return append(append([]string{}, ptr...), more...) }
	switch decided {
	case 2:
		pos = at()
	case 3:
		pos = at("tools")
	case 4:
		pos = at("rate_limit")
	case 5:
		pos, by.Rule = at(sub("max_calls")...), label
	case 6:
		by.Rule = label
		pos = at(ptr...)
		found := false
		for i, c := range rule.When {
			if c.Reason == v.Reason {
				pos, by.Expr, found = at(sub("when", fmt.Sprint(i), "expr")...), c.Expr, true
				break
			}
		}
		if !found {
			pos = extensionPos(p, doc, fmt.Sprintf("%q", v.Reason))
		}
	case 7:
		pos, by.Rule = at(sub("cost")...), label
	case 8:
		by.Rule = label
		if rule.RequiresApproval {
			pos = at(sub("requires_approval")...)
		} else {
			pos = extensionPos(p, doc, "require_approval")
		}
	case 9:
		pos, by.Rule = at(ptr...), label
	}
	by.File, by.Line, by.Column = pos.File, pos.Line, pos.Col
	if by.File == "" {
		by.File = doc.File
	}
	ex.DecidedBy = by
	return ex
}

// extensionPos is where the first extension that mentions text says it: the
// line in its file (read from a path) or in the policy's source block.
func extensionPos(p policy.Policy, doc *source.Document, text string) diag.Position {
	for i, m := range p.Rego {
		idx := strings.Index(m.Source, text)
		if idx < 0 {
			continue
		}
		line := strings.Count(m.Source[:idx], "\n") + 1
		col := idx - strings.LastIndex(m.Source[:idx], "\n")
		if path, ok := regoPath(doc, i); ok {
			return diag.Position{File: path, Line: line, Col: col}
		}
		pos, _ := doc.TextPos(diag.Pointer("rego", fmt.Sprint(i), "source"))
		if pos.Line > 0 {
			pos.Line += line - 1
			pos.Col += col - 1
		}
		return pos
	}
	return doc.Pos("/rego")
}

// regoPath is the path of extension i as the policy file gives it, resolved
// against the policy's directory.
func regoPath(doc *source.Document, i int) (string, bool) {
	top, ok := doc.Value.(map[string]any)
	if !ok {
		return "", false
	}
	list, _ := top["rego"].([]any)
	if i >= len(list) {
		return "", false
	}
	m, _ := list[i].(map[string]any)
	path, ok := m["path"].(string)
	if !ok {
		return "", false
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(doc.File), path)
	}
	return path, true
}

func writeExplanation(w io.Writer, req lineage.Request, ex *Explanation) {
	v := ex.Verdict
	fmt.Fprintf(w, "request %s at %s\n", req.Tool, req.At.UTC().Format(time.RFC3339Nano))
	for _, s := range ex.Steps {
		fmt.Fprintf(w, "  %d %-11s %-7s %s\n", s.Step, s.Name, s.Result, s.Detail)
	}
	scar := "no scar"
	if v.Scar != nil {
		scar = string(v.Scar.Severity) + " scar"
	}
	fmt.Fprintf(w, "verdict: %s %s (%s)\n", v.Decision, v.Reason, scar)
	by := ex.DecidedBy
	fmt.Fprintf(w, "decided by step %d (%s) at %s:%d:%d", by.Step, stepNames[by.Step], by.File, by.Line, by.Column)
	if by.Rule != "" {
		fmt.Fprintf(w, " %s", by.Rule)
	}
	if by.Expr != "" {
		fmt.Fprintf(w, ": %s", by.Expr)
	}
	fmt.Fprintln(w)
}

// explainer holds what request --explain needs from before the request: the
// agent's state and policy, and the source its positions point into.
type explainer struct {
	state  lineage.State
	policy policy.Policy
	doc    *source.Document
}

// newExplainer reads the agent's state and the policy of its log; file, if
// given, must be that policy's source (the same digest).
func newExplainer(ctx context.Context, rt *runtime.Runtime, agent, file string) (*explainer, error) {
	st, err := rt.State(ctx, agent)
	if err != nil {
		return nil, err
	}
	recs, err := rt.Records(agent)
	if err != nil {
		return nil, err
	}
	var body lineage.PolicyBody
	for _, rec := range recs {
		if rec.Kind == lineage.KindPolicy {
			if err := json.Unmarshal(rec.Body, &body); err != nil {
				return nil, err
			}
			break
		}
	}
	c, err := compiler.Compile("", body.Policy)
	if err != nil {
		return nil, fmt.Errorf("the policy of %s: %w", agent, err)
	}
	name, data := agent+" (policy in its log)", []byte(body.Policy)
	if file != "" {
		fc, err := compiler.CompileFile(file)
		if err != nil {
			return nil, fmt.Errorf("--policy %s: %w", file, err)
		}
		if fc.Digest != c.Digest {
			return nil, fmt.Errorf("--policy %s is not the policy of %s (%s, not %s)", file, agent, fc.Digest, c.Digest)
		}
		if data, err = os.ReadFile(file); err != nil {
			return nil, err
		}
		name = file
	}
	doc, diags := source.Load(name, data)
	if len(diags) > 0 {
		return nil, diags
	}
	return &explainer{state: st, policy: c.Policy, doc: doc}, nil
}
