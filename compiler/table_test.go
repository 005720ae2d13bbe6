package compiler

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage/policy"
)

// TestTableMatchesChain pins D60 (a policy of more than 64 tools is a table): a policy written as a table (as every
// policy of more than chainTools tools is) decides every input exactly as the
// same policy written as one chain. Each test policy is compiled both ways and
// both are evaluated over a grid of inputs around each rule's figures: every
// listed tool and an unlisted one, both modes, budgets around the cost, calls
// around the cap, inside and outside the rate window, scores at the limit,
// args that meet and break the CEL constraints.
func TestTableMatchesChain(t *testing.T) {
	files := testPolicies(t)
	tables := 0
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			chain := compileWith(t, file, 1<<30)
			table := compileWith(t, file, 0)
			if len(chain.Policy.Tools) > 0 {
				tables++
				if src := table.Modules[len(table.Modules)-1-len(table.Policy.Rego)].Source; !strings.Contains(src, "tools := {") {
					t.Fatalf("the table form has no table:\n%s", src)
				}
			}
			qc, qt := prepare(t, chain), prepare(t, table)
			n := 0
			for _, in := range grid(chain) {
				a, errA := qc.Eval(context.Background(), rego.EvalParsedInput(in))
				b, errB := qt.Eval(context.Background(), rego.EvalParsedInput(in))
				if fmt.Sprint(a, errA) != fmt.Sprint(b, errB) {
					t.Fatalf("input %v:\nchain: %v %v\ntable: %v %v", in, a, errA, b, errB)
				}
				n++
			}
			if n == 0 {
				t.Fatal("no inputs")
			}
		})
	}
	if tables < 8 {
		t.Errorf("only %d policies with tools", tables)
	}
}

// testPolicies lists the valid policies of the test data.
func testPolicies(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"testdata/golden/*/policy.yaml", "testdata/valid/*.yaml", "testdata/valid/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("%d policies: the test data moved", len(files))
	}
	return files
}

func compileWith(t *testing.T, file string, max int) *policy.Compiled {
	t.Helper()
	old := chainTools
	chainTools = max
	defer func() { chainTools = old }()
	c, err := CompileFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func prepare(t *testing.T, c *policy.Compiled) rego.PreparedEvalQuery {
	t.Helper()
	opts := append([]func(*rego.Rego){rego.Query(c.Query), rego.SetRegoVersion(ast.RegoV1), rego.Compiler(c.Compiler)}, c.Options...)
	pq, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pq
}

// grid lists the inputs of the comparison: the whole input of docs/policy.md#cel-constraints, docs/extensions.md.
func grid(c *policy.Compiled) []ast.Value {
	n := c.Policy
	tools := []string{"not_a_listed_tool"}
	for name := range n.Tools {
		tools = append(tools, name)
	}
	sort.Strings(tools)
	kths := []string{""}
	if n.RateLimit != nil {
		window := n.RateLimit.WindowSecs * 1_000_000_000
		kths = append(kths, fmt.Sprint(window-1), fmt.Sprint(window))
	}
	argsList := []string{`{}`}
	if c.Reads.Args || c.Reads.All { // CEL constraints or extensions read them
		argsList = append(argsList, `{"amount": 100, "currency": "EUR", "to": "a@example.com", "recipient": "x@example.com"}`,
			`{"amount": 1000000, "currency": "GBP", "to": "a@evil.test", "recipient": "x@evil.test"}`,
			`{"to": "a@example.com"}`, `{"to": ["a@example.com"]}`) // argument schemas
	}
	var out []ast.Value
	for _, tool := range tools {
		r, ok := n.Tools[tool]
		if !ok && n.DefaultRule != nil {
			r = *n.DefaultRule
		}
		maxCalls := int64(3)
		if r.MaxCalls != nil {
			maxCalls = *r.MaxCalls
		}
		rule := "null"
		if raw, ok := c.Rules[tool]; ok {
			rule = string(raw)
		} else if c.DefaultRule != nil {
			rule = string(c.DefaultRule)
		}
		for _, mode := range []string{"request", "approve"} {
			for _, remaining := range []int64{0, r.Cost, r.Cost + 1} {
				for _, calls := range []int64{0, maxCalls - 1, maxCalls} {
					for _, kth := range kths {
						for _, score := range []int64{0, *n.ScarLimit - 1} {
							for _, args := range argsList {
								rate := ""
								if kth != "" {
									rate = `, "rate_kth_age_ns": ` + kth
								}
								in := fmt.Sprintf(`{"mode": %q, "request": {"id": "r1", "tool": %q, "args": %s, "at": "2026-01-01T00:00:00Z", "at_ns": 1767225600000000000},
									"state": {"budget": %d, "spent": %d, "remaining": %d, "scar_score": %d, "calls": {%q: %d}, "tool_calls": %d}%s, "rule": %s}`,
									mode, tool, args, n.Budget, n.Budget-remaining, remaining, score, tool, calls, calls, rate, rule)
								out = append(out, ast.MustParseTerm(in).Value)
							}
						}
					}
				}
			}
		}
	}
	return out
}
