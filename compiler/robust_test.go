package compiler_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
)

// TestBadInput: hostile input is a diag.List error, quickly, never a panic.
func TestBadInput(t *testing.T) {
	big := make([]byte, 10<<20)
	for i := range big {
		big[i] = ' '
	}
	copy(big, "budget: 1\ntools: {}\ndescription: x")
	deepJSON := strings.Repeat(`{"a":`, 100_000) + "1" + strings.Repeat("}", 100_000)
	deepYAML := "budget: 1\ntools: {}\nname: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	var deepBlock strings.Builder
	deepBlock.WriteString("budget: 1\ntools:\n")
	for i := range 200 {
		fmt.Fprintf(&deepBlock, "%s a:\n", strings.Repeat(" ", i+1))
	}
	for _, tc := range []struct {
		name, src string
		code      string
	}{
		{"10 MB", string(big), diag.CodeTooLarge},
		{"deep JSON", deepJSON, diag.CodeTooDeep},
		{"deep YAML flow", deepYAML, ""}, // yaml.v3 stops it first: a syntax error
		{"deep YAML block", deepBlock.String(), diag.CodeTooDeep},
		{"unclosed JSON", strings.Repeat(`{"a": [`, 50), diag.CodeSyntax},
		{"binary", "\x00\x01\x02\xff\xfe", diag.CodeSyntax},
		{"budget 2^53+1", `{"budget": 9007199254740993, "tools": {}}`, diag.CodeNumber},
		{"budget 2^64", "budget: 18446744073709551616\ntools: {}\n", diag.CodeNumber},
		{"cost 1e400", `{"budget": 1, "tools": {"a": {"cost": 1e400}}}`, diag.CodeNumber},
		{"window 2^53 as float", `{"budget": 1, "tools": {}, "rate_limit": {"max_actions": 1, "window_secs": 9007199254740993.0}}`, diag.CodeNumber},
		{"duplicate key JSON", `{"budget": 1, "tools": {}, "budget": 2}`, diag.CodeDuplicateKey},
		{"duplicate key YAML", "budget: 1\ntools: {}\nbudget: 2\n", diag.CodeDuplicateKey},
		{"duplicate tool", "budget: 1\ntools:\n  a: {cost: 1}\n  a: {cost: 2}\n", diag.CodeDuplicateKey},
		{"alias bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
			"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n" +
			"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nbudget: 1\ntools: {}\n", ""},
		{"a list", "[1, 2, 3]", diag.CodeType},
		{"YAML that looks like JSON", "{budget: 1, tools: {}}", diag.CodeSyntax},
		{"empty", "", diag.CodeSyntax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var (
				c   any
				err error
			)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panic: %v", r)
					}
				}()
				c, err = compiler.Compile("bad", []byte(tc.src))
			}()
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("took %v", el)
			}
			if err == nil {
				t.Fatalf("compiled: %v", c)
			}
			l := diagList(t, err)
			if tc.code == "" {
				return
			}
			for _, d := range l {
				if d.Code == tc.code {
					return
				}
			}
			t.Errorf("no %s diagnostic:\n%v", tc.code, err)
		})
	}
	t.Run("no such file", func(t *testing.T) {
		c, err := compiler.CompileFile(filepath.Join(t.TempDir(), "missing.yaml"))
		if c != nil || err == nil {
			t.Fatal("compiled")
		}
		if l := diagList(t, err); l[0].Code != diag.CodeIO {
			t.Errorf("got %v", l)
		}
	})
}

// TestExtensionWithoutRules: an extension in a policy that no tool rule can
// match (no tools, no default rule) is still a policy the schema admits; it must
// compile (every request is unlisted_tool), not fail with an internal error.
func TestExtensionWithoutRules(t *testing.T) {
	const ext = `
rego:
  - source: |
      package lineage.ext.x

      deny contains {"reason": "r"} if input.request.tool == "b"
      require_approval contains "a" if input.request.tool == "b"
`
	for name, src := range map[string]string{
		"no tools":                 "budget: 1\ntools: {}\n" + ext,
		"no tools, empty module":   "budget: 1\ntools: {}\nrego: [{source: \"package lineage.ext.none\\n\"}]\n",
		"tools":                    "budget: 1\ntools: {a: {cost: 0}}\n" + ext,
		"default rule":             "budget: 1\ntools: {}\ndefault_rule: {cost: 0}\n" + ext,
		"every field (valid corp)": readFile(t, filepath.Join("testdata", "valid", "everything.json")),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := compiler.Compile("p.yaml", []byte(src))
			if err != nil {
				t.Fatalf("compile:\n%v", err)
			}
			pq := prepare(t, c)
			got := verdict(t, pq, runtimeInput("b", `{}`, time.Unix(1, 0), nil))
			if strings.Contains(name, "no tools") && got != "deny unlisted_tool" {
				t.Errorf("got %s", got)
			}
		})
	}
}

// TestGeneratedStrings: free text from the policy (descriptions, constraint
// expressions) lands in the generated Rego; any string the schema admits must
// give Rego that parses and carries the string unchanged.
func TestGeneratedStrings(t *testing.T) {
	long := "args.xy == \"" + strings.Repeat("é", 60) + "\"" // cut at 77 bytes: mid-rune
	for _, tc := range []struct {
		name        string
		description string
		expr        string
	}{
		{"plain", "Pay one invoice.", "true"},
		{"quotes and backslashes", `say "hi" \ bye`, `args.s != "\"\\"`},
		{"newline and tab", "line 1\nline\t2", "true &&\n  true"},
		{"bell", "ring \a", "true"},
		{"vertical tab", "a\vb", "true"},
		{"DEL", "a\x7fb", "true"},
		{"escape", "\x1b[31mred\x1b[0m", "true"},
		{"non-printable astral", "tag \U000E0041", "true"},
		{"line separator", "a\u2028b", "true"},
		{"NUL in description", "a\x00b", "true"},
		{"NUL in expr", "", `args.s != "` + "\x00" + `"`},
		{"BOM in expr", "", `args.s != "` + "\ufeff" + `"`},
		{"BOM in description", "a\ufeffb", "true"},
		{"long multibyte expr", "", long},
		{"expr with comment marker", "", `args.s != "# not a comment"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := map[string]any{"cost": 0, "when": []any{map[string]any{"expr": tc.expr, "reason": "r"}}}
			if tc.description != "" {
				rule["description"] = tc.description
			}
			src := mustJSON(t, map[string]any{"budget": 1, "tools": map[string]any{"a": rule}})
			if doc, ds := source.Load("", []byte(src)); len(ds) > 0 || len(source.Validate(doc, "policy")) > 0 {
				t.Fatalf("the loader refuses the policy, so the generator is not tested on it: %v", ds)
			}
			c, err := compiler.Compile("", []byte(src))
			if err != nil {
				t.Fatalf("compile:\n%v", err)
			}
			// The matched rule, as extensions see it, carries the strings unchanged.
			mod, err := ast.ParseModuleWithOpts(compiler.PolicyModule, policyModule(t, c), ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range mod.Rules {
				if r.Head.Name.String() != "rule" {
					continue
				}
				v, err := ast.JSON(r.Head.Value.Value)
				if err != nil {
					t.Fatal(err)
				}
				m := v.(map[string]any)
				if d, _ := m["description"].(string); d != tc.description {
					t.Errorf("description %q, want %q", d, tc.description)
				}
				w := m["when"].([]any)[0].(map[string]any)
				if w["expr"] != tc.expr {
					t.Errorf("expr %q, want %q", w["expr"], tc.expr)
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestLargeExtensionFile: an extension read from a file is inlined into the
// normalized document. When that makes the document larger than the loader
// accepts, recompiling it (what the runtime does when it reopens the agent)
// fails: the compiler must refuse such a policy up front instead.
func TestLargeExtensionFile(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("package lineage.ext.big\n\n")
	line := "# " + strings.Repeat("padding ", 12) + "\n"
	for b.Len() < source.MaxBytes+1024 {
		b.WriteString(line)
	}
	b.WriteString("deny contains {\"reason\": \"big\"} if input.request.tool == \"x\"\n")
	if err := os.WriteFile(filepath.Join(dir, "big.rego"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("budget: 1\ntools: {x: {cost: 0}}\nrego: [{path: big.rego}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := compiler.CompileFile(pol)
	if err != nil {
		diagList(t, err) // refusing it up front is fine
		return
	}
	if _, err := compiler.Compile("", c.Document); err != nil {
		t.Errorf("compiled (document %d bytes), but the document does not recompile:\n%v", len(c.Document), err)
	}
}

// TestAllErrorsReported: the compiler reports every problem it finds, not just
// those of the first stage that finds one (package doc: "it reports all of
// them, sorted, never just the first").
func TestAllErrorsReported(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		codes     []string
	}{
		{
			name: "CEL error and extension compile error",
			src: `budget: 1
tools:
  pay:
    cost: 1
    when: [{expr: "args.amount <= limit", reason: r}]
rego:
  - source: |
      package lineage.ext.x

      deny contains {"reason": "r"} if unknown.fn(input.request.tool)
`,
			codes: []string{diag.CodeCELType, diag.CodeRegoCompile},
		},
		{
			name: "forbidden builtin in one extension, unknown function in another",
			src: `budget: 1
tools:
  pay: {cost: 1}
rego:
  - source: |
      package lineage.ext.x

      deny contains {"reason": "r"} if rand.intn("x", 2) == 0
  - source: |
      package lineage.ext.y

      deny contains {"reason": "r"} if unknown.fn(input.request.tool)
`,
			codes: []string{diag.CodeRegoBuiltin, diag.CodeRegoCompile},
		},
		{
			name: "CEL error and forbidden builtin",
			src: `budget: 1
tools:
  pay:
    cost: 1
    when: [{expr: "args.amount <=", reason: r}]
rego:
  - source: |
      package lineage.ext.x

      deny contains {"reason": "r"} if time.now_ns() > 0
`,
			codes: []string{diag.CodeCELSyntax, diag.CodeRegoBuiltin},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compiler.Compile("p.yaml", []byte(tc.src))
			if err == nil {
				t.Fatal("compiled")
			}
			got := map[string]bool{}
			for _, d := range diagList(t, err) {
				got[d.Code] = true
			}
			for _, code := range tc.codes {
				if !got[code] {
					t.Errorf("no %s diagnostic in:\n%v", code, err)
				}
			}
		})
	}
}

// TestExtensionDiagnosticsInModuleOrder: the diagnostics of one inline module
// share the policy position; they should still come in module order.
func TestExtensionDiagnosticsInModuleOrder(t *testing.T) {
	_, err := compiler.CompileFile(filepath.Join("testdata", "extensions", "forbidden_opa_runtime.yaml"))
	if err == nil {
		t.Fatal("compiled")
	}
	re := regexp.MustCompile(`module line (\d+):(\d+)`)
	last := 0
	for _, d := range diagList(t, err) {
		m := re.FindStringSubmatch(d.Message)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		if line < last {
			t.Errorf("module line %d reported after line %d:\n%v", line, last, err)
		}
		last = line
	}
}

// TestWallClockBuiltins: builtins that read the wall clock are as unreplayable
// as time.now_ns, though OPA does not mark them nondeterministic (docs/extensions.md:
// "so replaying a log always reproduces its verdicts").
func TestWallClockBuiltins(t *testing.T) {
	for name, call := range map[string]string{
		// x509.Verify with a zero CurrentTime checks validity against time.Now().
		"crypto.x509.parse_and_verify_certificates":              `crypto.x509.parse_and_verify_certificates(input.request.args.chain)`,
		"crypto.x509.parse_and_verify_certificates_with_options": `crypto.x509.parse_and_verify_certificates_with_options(input.request.args.chain, {})`,
		// Outside the allowlist like all of io.*; here as the control.
		"io.jwt.decode_verify": `io.jwt.decode_verify(input.request.args.token, {"secret": "s"})`,
	} {
		t.Run(name, func(t *testing.T) {
			src := fmt.Sprintf("budget: 1\ntools: {pay: {cost: 1}}\nrego:\n  - source: |\n      package lineage.ext.clock\n\n      deny contains {\"reason\": \"r\"} if {\n      \t[ok, _] := %s\n      \tnot ok\n      }\n", call)
			c, err := compiler.Compile("p.yaml", []byte(src))
			if err == nil {
				t.Fatalf("compiled (digest %s): the verdict would depend on when the log is replayed", c.Digest)
			}
			found := false
			for _, d := range diagList(t, err) {
				found = found || d.Code == diag.CodeRegoBuiltin
			}
			if !found {
				t.Errorf("no %s diagnostic:\n%v", diag.CodeRegoBuiltin, err)
			}
		})
	}
}
