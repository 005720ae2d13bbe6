package compiler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/policy"
)

var celAtRE = regexp.MustCompile(`at expression (\d+):(\d+)`)

// TestCELPositions checks that each CEL diagnostic's file:line:col is where the
// problem is: the line that holds the offending part of the expression and, when
// cel-go gives a position, the column of that character in the file.
func TestCELPositions(t *testing.T) {
	for _, file := range errorCases(t, filepath.Join("testdata", "cel")) {
		t.Run(strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			doc, ds := source.Load(file, data)
			if len(ds) > 0 {
				t.Fatal(ds)
			}
			fileLines := strings.Split(string(data), "\n")
			_, err = compiler.CompileFile(file)
			if err == nil {
				t.Fatal("compiled")
			}
			for _, d := range diagList(t, err) {
				expr, ok := lookup(doc.Value, d.Pointer).(string)
				if !ok {
					t.Errorf("no expression at %s", d.Pointer)
					continue
				}
				if d.Line < 1 || d.Line > len(fileLines) {
					t.Errorf("line %d out of the file: %s", d.Line, d)
					continue
				}
				exprLines := strings.Split(expr, "\n")
				el, ec := 1, 0 // line of the expression to find; column in it (1-based, 0: any)
				if m := celAtRE.FindStringSubmatch(d.Message); m != nil {
					el, _ = strconv.Atoi(m[1])
					ec, _ = strconv.Atoi(m[2])
				}
				want := strings.TrimSpace(exprLines[el-1])
				line := fileLines[d.Line-1]
				idx := strings.Index(line, want)
				if idx < 0 {
					at := "nowhere"
					for i, l := range fileLines {
						if strings.Contains(l, want) {
							at = fmt.Sprintf("line %d", i+1)
						}
					}
					t.Errorf("%s\n  points at line %d %q,\n  but the expression's line %q is on %s", d, d.Line, line, want, at)
					continue
				}
				if ec == 0 {
					continue
				}
				// Columns count characters from 1; cel-go counts from 1 in the message.
				lead := len(exprLines[el-1]) - len(strings.TrimLeft(exprLines[el-1], " \t"))
				wantCol := idx + 1 + (ec - 1) - lead
				if d.Col != wantCol {
					t.Errorf("%s\n  column %d, want %d (the character at expression %d:%d):\n  %s\n  %s^", d, d.Col, wantCol, el, ec,
						line, strings.Repeat(" ", max(wantCol-1, 0)))
				}
			}
		})
	}
}

// lookup follows a JSON pointer (no escapes needed in these cases).
func lookup(v any, ptr string) any {
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// celPolicy exercises every CEL variable. Constraint numbers: clock 0, counted 1,
// flagged 2, pay 3-4, stateful 5; default rule 6.
const celPolicy = `
budget: 1000
tools:
  pay:
    cost: 1
    when:
      - expr: args.amount <= 100
        reason: amount_over_limit
      - expr: '!has(args.note) || args.note != "bribe"'
        reason: bribe
        scar: severe
  counted:
    cost: 0
    when:
      - expr: state.calls.read >= 1
        reason: read_first
        scar: minor
  stateful:
    cost: 0
    when:
      - expr: state.budget == 1000 && state.spent == 10 && state.remaining == 990 && state.scar_score == 3
        reason: state_mismatch
  flagged:
    cost: 0
    when:
      - expr: args.approved
        reason: not_approved
  clock:
    cost: 0
    when:
      - expr: now == timestamp("2026-03-04T05:06:07.000000008Z")
        reason: wrong_time
default_rule:
  cost: 0
  when:
    - expr: tool.startsWith("ok_")
      reason: not_ok
`

// runtimeInput builds the input the runtime gives the query (runtime/engine.go input()).
func runtimeInput(tool, args string, at time.Time, calls map[string]int) ast.Value {
	req := ast.NewObject(
		ast.Item(ast.StringTerm("id"), ast.StringTerm("req_2")),
		ast.Item(ast.StringTerm("tool"), ast.StringTerm(tool)),
		ast.Item(ast.StringTerm("args"), ast.MustParseTerm(args)),
		ast.Item(ast.StringTerm("at"), ast.StringTerm(at.UTC().Format(time.RFC3339Nano))),
		ast.Item(ast.StringTerm("at_ns"), ast.IntNumberTerm(int(at.UnixNano()))),
	)
	c := ast.NewObject()
	for name, n := range calls {
		c.Insert(ast.StringTerm(name), ast.IntNumberTerm(n))
	}
	state := ast.NewObject(
		ast.Item(ast.StringTerm("budget"), ast.IntNumberTerm(1000)),
		ast.Item(ast.StringTerm("spent"), ast.IntNumberTerm(10)),
		ast.Item(ast.StringTerm("remaining"), ast.IntNumberTerm(990)),
		ast.Item(ast.StringTerm("scar_score"), ast.IntNumberTerm(3)),
		ast.Item(ast.StringTerm("calls"), ast.NewTerm(c)),
	)
	return ast.NewObject(
		ast.Item(ast.StringTerm("mode"), ast.StringTerm("request")),
		ast.Item(ast.StringTerm("request"), ast.NewTerm(req)),
		ast.Item(ast.StringTerm("state"), ast.NewTerm(state)),
	)
}

// prepare readies a compiled policy's query the way the runtime does.
func prepare(t testing.TB, c *policy.Compiled) rego.PreparedEvalQuery {
	t.Helper()
	opts := []func(*rego.Rego){rego.Query(c.Query), rego.SetRegoVersion(ast.RegoV1)}
	for _, m := range c.Modules {
		opts = append(opts, rego.Module(m.Name, m.Source))
	}
	opts = append(opts, c.Options...)
	pq, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return pq
}

// verdict evaluates the query for one input and returns "decision reason".
func verdict(t testing.TB, pq rego.PreparedEvalQuery, in ast.Value) string {
	t.Helper()
	rs, err := pq.Eval(context.Background(), rego.EvalParsedInput(in))
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("no single verdict: %v", rs)
	}
	v, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		t.Fatalf("verdict %T %v", rs[0].Expressions[0].Value, rs[0].Expressions[0].Value)
	}
	return fmt.Sprintf("%v %v", v["decision"], v["reason"])
}

// TestCELSemantics evaluates constraints through the lineage.cel builtin, with
// OPA directly and an input shaped like the runtime's (docs/policy.md#cel-constraints).
func TestCELSemantics(t *testing.T) {
	c := mustCompile(t, "", celPolicy)
	if len(c.Options) == 0 {
		t.Fatal("a policy with CEL constraints has no rego options (the lineage.cel builtin)")
	}
	pq := prepare(t, c)
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	read := map[string]int{"read": 1}
	for _, tc := range []struct {
		tool, args string
		at         time.Time
		calls      map[string]int
		want       string
	}{
		{"pay", `{"amount": 99.5}`, at, nil, "allow ok"},
		{"pay", `{"amount": 100}`, at, nil, "allow ok"},
		{"pay", `{"amount": 100.0}`, at, nil, "allow ok"},
		{"pay", `{"amount": 1e2}`, at, nil, "allow ok"},
		{"pay", `{"amount": -5}`, at, nil, "allow ok"},
		{"pay", `{"amount": 100.5}`, at, nil, "deny amount_over_limit"},
		{"pay", `{"amount": 101}`, at, nil, "deny amount_over_limit"},
		{"pay", `{"amount": 100000000000000000000000}`, at, nil, "deny amount_over_limit"},
		// Fail closed: a missing arg, a string, null: evaluation errors violate.
		{"pay", `{}`, at, nil, "deny amount_over_limit"},
		{"pay", `{"amount": "50"}`, at, nil, "deny amount_over_limit"},
		{"pay", `{"amount": null}`, at, nil, "deny amount_over_limit"},
		{"pay", `{"amount": [1]}`, at, nil, "deny amount_over_limit"},
		// The first failing constraint in order decides.
		{"pay", `{"amount": 5, "note": "bribe"}`, at, nil, "deny bribe"},
		{"pay", `{"amount": 500, "note": "bribe"}`, at, nil, "deny amount_over_limit"},
		{"pay", `{"amount": 5, "note": "lunch"}`, at, nil, "allow ok"},
		// state is visible, calls included.
		{"counted", `{}`, at, read, "allow ok"},
		{"counted", `{}`, at, map[string]int{"read": 0}, "deny read_first"},
		{"counted", `{}`, at, nil, "deny read_first"},
		{"stateful", `{}`, at, nil, "allow ok"},
		// now is the request time, to the nanosecond.
		{"clock", `{}`, at, nil, "allow ok"},
		{"clock", `{}`, at.Add(time.Nanosecond), nil, "deny wrong_time"},
		{"clock", `{}`, at.Add(-time.Second), nil, "deny wrong_time"},
		// A dyn expression holds only when it is exactly true.
		{"flagged", `{"approved": true}`, at, nil, "allow ok"},
		{"flagged", `{"approved": false}`, at, nil, "deny not_approved"},
		{"flagged", `{"approved": "yes"}`, at, nil, "deny not_approved"},
		{"flagged", `{"approved": 1}`, at, nil, "deny not_approved"},
		{"flagged", `{}`, at, nil, "deny not_approved"},
		// tool is visible (default rule).
		{"ok_search", `{}`, at, nil, "allow ok"},
		{"admin.delete", `{}`, at, nil, "deny not_ok"},
	} {
		name := fmt.Sprintf("%s %s %s %v", tc.tool, tc.args, tc.at.Format(time.RFC3339Nano), tc.calls)
		t.Run(name, func(t *testing.T) {
			if got := verdict(t, pq, runtimeInput(tc.tool, tc.args, tc.at, tc.calls)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCELPoliciesAreSeparate: each compiled policy's builtin sees its own
// expressions, even when two are prepared side by side.
func TestCELPoliciesAreSeparate(t *testing.T) {
	a := mustCompile(t, "", "budget: 10\ntools: {t: {cost: 0, when: [{expr: 'args.n < 5', reason: a_says_no}]}}\n")
	b := mustCompile(t, "", "budget: 10\ntools: {t: {cost: 0, when: [{expr: 'args.n > 5', reason: b_says_no}]}}\n")
	pa, pb := prepare(t, a), prepare(t, b)
	at := time.Unix(1, 0)
	if got := verdict(t, pa, runtimeInput("t", `{"n": 1}`, at, nil)); got != "allow ok" {
		t.Errorf("a: %s", got)
	}
	if got := verdict(t, pb, runtimeInput("t", `{"n": 1}`, at, nil)); got != "deny b_says_no" {
		t.Errorf("b: %s", got)
	}
	if got := verdict(t, pa, runtimeInput("t", `{"n": 9}`, at, nil)); got != "deny a_says_no" {
		t.Errorf("a: %s", got)
	}
}

// TestCELMalformedInput: lineage.cel fails closed on an input that lacks what
// the runtime always gives (a hand-written Rego test, say); it must not panic.
// The expression reads every variable; request.at is not one of them.
func TestCELMalformedInput(t *testing.T) {
	c := mustCompile(t, "", "budget: 10\ntools: {t: {cost: 0, when: [{expr: \"tool == 't' && size(args) == 0 && state.budget > 0 && size(state.calls) == 0 && now > timestamp('1970-01-01T00:00:00Z')\", reason: never}]}}\n")
	pq := prepare(t, c)
	full := runtimeInput("t", `{}`, time.Unix(1, 0), nil)
	if got := verdict(t, pq, full); got != "allow ok" {
		t.Fatalf("full input: %s", got)
	}
	for _, drop := range []string{"at_ns", "args", "tool", "at"} {
		t.Run("without "+drop, func(t *testing.T) {
			in := ast.MustParseTerm(full.String()).Value.(ast.Object)
			req := in.Get(ast.StringTerm("request")).Value.(ast.Object)
			kept := ast.NewObject()
			req.Foreach(func(k, v *ast.Term) {
				if k.Value.Compare(ast.String(drop)) != 0 {
					kept.Insert(k, v)
				}
			})
			in.Insert(ast.StringTerm("request"), ast.NewTerm(kept))
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("evaluation panicked: %v", r)
				}
			}()
			rs, err := pq.Eval(context.Background(), rego.EvalParsedInput(in))
			if err != nil {
				return // an evaluation error is fine: the runtime fails closed on it
			}
			if len(rs) == 1 {
				v, _ := rs[0].Expressions[0].Value.(map[string]any)
				if allowed := v["decision"] == "allow"; allowed != (drop == "at") {
					t.Errorf("without %s: %v", drop, v)
				}
			}
		})
	}
}

// TestInputReads: the compiler tells the runtime which parts of the input the
// policy's rules read, and no less: a CEL constraint that names state (even
// inside a macro) gets the whole state; an extension gets everything.
func TestInputReads(t *testing.T) {
	ext := "rego:\n  - source: |\n      package lineage.ext.x\n      deny contains {\"reason\": \"no\"} if input.request.id == \"x\"\n"
	for _, tc := range []struct {
		name, src string
		want      policy.InputReads
	}{
		{"no CEL", "budget: 10\ntools: {t: {cost: 1}}\n", policy.InputReads{}},
		{"CEL on args", "budget: 10\ntools: {t: {cost: 1, when: [{expr: 'args.n < 3', reason: big}]}}\n", policy.InputReads{Args: true}},
		{"CEL on tool and now", "budget: 10\ntools: {t: {cost: 1, when: [{expr: \"tool == 't' && now > timestamp('2020-01-01T00:00:00Z')\", reason: old}]}}\n", policy.InputReads{Args: true}},
		{"CEL on state", "budget: 10\ntools: {t: {cost: 1, when: [{expr: 'args.n < 3', reason: big}, {expr: \"state.calls.exists(k, k == 't')\", reason: again}]}}\n", policy.InputReads{Args: true, State: true}},
		{"CEL in the default rule on state", "budget: 10\ntools: {}\ndefault_rule: {cost: 1, when: [{expr: 'state.spent < 5', reason: spent}]}\n", policy.InputReads{Args: true, State: true}},
		{"extension", "budget: 10\ntools: {t: {cost: 1}}\n" + ext, policy.InputReads{All: true}},
	} {
		if got := mustCompile(t, tc.name, tc.src).Reads; got != tc.want {
			t.Errorf("%s: Reads = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestCELConvertsEachVariableOnce: cel-go asks for a variable every time an
// expression reads it, once per element in a comprehension; the input is
// converted once per constraint, not per read (which made one request with
// a 10,000-element list take seconds). Counted in allocations, not time.
func TestCELConvertsEachVariableOnce(t *testing.T) {
	c := mustCompile(t, "", "budget: 10\ntools: {t: {cost: 0, when: [{expr: 'args.items.all(x, x <= args.max)', reason: big}]}}\n")
	pq := prepare(t, c)
	const n = 2000
	items := make([]string, n)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	in := runtimeInput("t", `{"max": 100000, "items": [`+strings.Join(items, ",")+`]}`, time.Unix(1, 0), nil)
	if got := verdict(t, pq, in); got != "allow ok" {
		t.Fatalf("verdict %s, want allow ok", got)
	}
	allocs := testing.AllocsPerRun(1, func() { verdict(t, pq, in) })
	// Converting args once is about n allocations and evaluating the
	// comprehension a few per element; converting per read is about n*n.
	t.Logf("%.0f allocations for %d elements", allocs, n)
	if allocs > 30*n {
		t.Errorf("%.0f allocations for one evaluation over %d elements: the input is converted per read", allocs, n)
	}
}
