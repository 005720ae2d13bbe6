package compiler_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
	lineagerego "github.com/lineage-guard/lineage/rego"
)

// extPolicy is a policy with one inline extension module.
func extPolicy(module string) string {
	var b strings.Builder
	b.WriteString("budget: 10\ntools: {pay: {cost: 1}}\nrego:\n  - source: |\n")
	for _, line := range strings.Split(module, "\n") {
		b.WriteString("      " + line + "\n")
	}
	return b.String()
}

// refused asserts that a module does not compile and that a diagnostic
// names the forbidden builtin with code rego_forbidden.
func refused(t *testing.T, module, builtin string) {
	t.Helper()
	c, err := compiler.Compile("p.yaml", []byte(extPolicy(module)))
	if err == nil {
		t.Fatalf("compiled (digest %s): a route to %s", c.Digest, builtin)
	}
	for _, d := range diagList(t, err) {
		if d.Code == diag.CodeRegoBuiltin && strings.Contains(d.Message, "builtin "+builtin+" ") {
			return
		}
	}
	t.Errorf("no %s diagnostic naming %s:\n%v", diag.CodeRegoBuiltin, builtin, err)
}

// TestForbiddenBuiltinRoutes: every way Rego has to reach a builtin is
// refused when the builtin is not on the allowlist (docs/extensions.md, issue 9).
func TestForbiddenBuiltinRoutes(t *testing.T) {
	const head = "package lineage.ext.x\n\n"
	for name, tc := range map[string]struct{ builtin, body string }{
		"call":                {"http.send", `deny contains {"reason": "r"} if http.send({"url": "u"})`},
		"with on a function":  {"http.send", "g(x) := x\n\ndeny contains {\"reason\": \"r\"} if {\n\tr := g({}) with g as http.send\n\tr.status_code\n}"},
		"with on a builtin":   {"rand.intn", `deny contains {"reason": "r"} if { x := count("ab") with count as rand.intn; x == 0 }`},
		"with on data path":   {"http.send", "g(x) := x\n\ndeny contains {\"reason\": \"r\"} if {\n\tr := g({}) with data.lineage.ext.x.g as http.send\n\tr\n}"},
		"with as the target":  {"time.now_ns", `deny contains {"reason": "r"} if { x := 1 with time.now_ns as 5; x == 1 }`},
		"with input value":    {"http.send", `deny contains {"reason": "r"} if { input.a with input as http.send({}) }`},
		"rule alias":          {"http.send", "send := http.send\n\ndeny contains {\"reason\": \"r\"} if send({})"},
		"function alias":      {"rand.intn", "roll(n) := rand.intn(\"d\", n)\n\ndeny contains {\"reason\": \"r\"} if roll(6) == 0"},
		"ref as value":        {"time.now_ns", `deny contains {"reason": "r"} if { f := time.now_ns; f }`},
		"in an array":         {"http.send", `deny contains {"reason": "r"} if { fs := [http.send]; fs[0] }`},
		"in an object":        {"uuid.rfc4122", `deny contains {"reason": "r"} if { o := {"f": uuid.rfc4122}; o.f }`},
		"in a comprehension":  {"uuid.rfc4122", `deny contains {"reason": "r"} if { xs := [x | some i in [1]; x := uuid.rfc4122(sprintf("%d", [i]))]; count(xs) > 0 }`},
		"in every":            {"rand.intn", `deny contains {"reason": "r"} if { every i in [1] { rand.intn("d", i) == 0 } }`},
		"in a negation":       {"net.lookup_ip_addr", `deny contains {"reason": "r"} if { not net.lookup_ip_addr("example.com") }`},
		"in a deny element":   {"opa.runtime", `deny contains {"reason": "r", "scar": opa.runtime().env.SCAR}`},
		"in require_approval": {"time.now_ns", `require_approval contains "late" if time.now_ns() > 0`},
		"in a default":        {"opa.runtime", "default env := {}\n\nenv := opa.runtime().env\n\ndeny contains {\"reason\": \"r\"} if env.X"},
		"output":              {"trace", `deny contains {"reason": "r"} if trace("x")`},
		"remote schema":       {"json.match_schema", `deny contains {"reason": "r"} if { [ok, _] := json.match_schema({}, {"$ref": "http://example.com/s"}); not ok }`},
		"jwt":                 {"io.jwt.decode", `deny contains {"reason": "r"} if { [_, p, _] := io.jwt.decode(input.request.args.t); p.x }`},
		"template string":     {"opa.runtime", `deny contains {"reason": $"env {opa.runtime().env}"} if input.request.args.x`},
		"in an else":          {"rand.intn", "pick := 1 if input.request.args.a\n\nelse := rand.intn(\"p\", 9)\n\ndeny contains {\"reason\": \"r\"} if pick == 0"},
		"in a with value arg": {"time.now_ns", "g(x) := x\n\ndeny contains {\"reason\": \"r\"} if {\n\tx := g(1) with input.now as time.now_ns()\n\tx\n}"},
		"policy reads itself": {"rego.parse_module", `deny contains {"reason": "r"} if rego.parse_module("a.rego", "package a")`},
	} {
		t.Run(name, func(t *testing.T) { refused(t, head+tc.body, tc.builtin) })
	}
}

// TestEveryUnlistedBuiltinRefused calls each OPA builtin outside the
// allowlist (whatever OPA adds later is outside it) and expects a refusal.
func TestEveryUnlistedBuiltinRefused(t *testing.T) {
	n := 0
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if lineagerego.AllowedBuiltin(b.Name) || b.Decl == nil || strings.HasPrefix(b.Name, "internal.") || b.Infix != "" {
			continue
		}
		if _, ok := ast.BuiltinMap[b.Name]; !ok {
			continue
		}
		args := make([]string, len(b.Decl.FuncArgs().Args))
		for i := range args {
			args[i] = fmt.Sprintf("input.request.args.a%d", i)
		}
		n++
		t.Run(b.Name, func(t *testing.T) {
			refused(t, fmt.Sprintf("package lineage.ext.x\n\ndeny contains {\"reason\": \"r\"} if {\n\tx := %s(%s)\n\tx\n}", b.Name, strings.Join(args, ", ")), b.Name)
		})
	}
	if n < 40 {
		t.Errorf("only %d builtins outside the allowlist: the test no longer tests much", n)
	}
}

// TestAllowedBuiltinsCompile: builtins on the allowlist, reached by a call,
// a with on an allowed builtin, or a local var that shares a namespace's
// name, compile.
func TestAllowedBuiltinsCompile(t *testing.T) {
	for name, body := range map[string]string{
		"strings and numbers": `deny contains {"reason": "r"} if { to_number(input.request.args.n) > 3; startswith(lower(input.request.args.s), "x") }`,
		"time from the input": `deny contains {"reason": "r"} if { [h, _, _] := time.clock(input.request.at_ns); h < 8 }`,
		"with an allowed one": `deny contains {"reason": "r"} if { x := lower("ab") with lower as upper; x == "AB" }`,
		"json and regex":      `deny contains {"reason": "r"} if { x := json.unmarshal(input.request.args.j); regex.match("^a", x.s) }`,
		"local named http":    `deny contains {"reason": "r"} if { http := {"send": 1}; http.send == 1 }`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := compiler.Compile("p.yaml", []byte(extPolicy("package lineage.ext.x\n\n"+body))); err != nil {
				t.Fatal(err)
			}
		})
	}
}
