package rego

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestAllowedBuiltinsExist: every listed name is a deterministic builtin of
// this OPA version (a typo or a removed builtin would silently allow nothing).
func TestAllowedBuiltinsExist(t *testing.T) {
	caps := Capabilities()
	have := map[string]bool{}
	for _, b := range caps.Builtins {
		have[b.Name] = true
	}
	for _, name := range allowedBuiltins {
		if !have[name] {
			t.Errorf("allowed builtin %s is not a deterministic builtin of this OPA version", name)
		}
	}
	if len(caps.Builtins) != len(allowedBuiltins) {
		t.Errorf("capabilities hold %d builtins, the allowlist %d", len(caps.Builtins), len(allowedBuiltins))
	}
}

// TestForbiddenBuiltinsLeftOut: the builtins docs/extensions.md names, every builtin OPA
// marks nondeterministic, and the families that reach outside are not allowed.
func TestForbiddenBuiltinsLeftOut(t *testing.T) {
	named := []string{"http.send", "net.lookup_ip_addr", "net.cidr_contains", "time.now_ns", "rand.intn",
		"uuid.rfc4122", "uuid.parse", "opa.runtime", "io.jwt.decode", "io.jwt.decode_verify", "print",
		"internal.print", "trace", "json.match_schema", "json.verify_schema",
		"crypto.x509.parse_and_verify_certificates", "providers.aws.sign_req", "rego.parse_module",
		"internal.test_case", "bits.lsh"}
	for _, name := range named {
		if AllowedBuiltin(name) {
			t.Errorf("%s is allowed", name)
		}
	}
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if b.Nondeterministic && AllowedBuiltin(b.Name) {
			t.Errorf("nondeterministic builtin %s is allowed", b.Name)
		}
	}
	for _, b := range Capabilities().Builtins {
		if b.Nondeterministic {
			t.Errorf("capabilities hold nondeterministic %s", b.Name)
		}
	}
}
