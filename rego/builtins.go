package rego

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// allowedBuiltins are the OPA builtins that lineage's Rego (the library, the
// generated policies, the users' extensions) may use: deterministic and pure,
// so that replaying a log reproduces its verdicts (docs/extensions.md). An allowlist: a
// builtin OPA adds later is refused until it is listed here.
//
// Left out on purpose: the outside world and the clock (http.send, net.*,
// opa.runtime, time.now_ns, io.jwt.* whose verify/sign read the clock or
// randomness), randomness (rand.*, uuid.*), output (print, trace),
// json.match_schema and json.verify_schema (a schema's $ref may be fetched),
// crypto.x509.* and crypto.parse_private_keys (certificate checks read the
// clock), providers.aws.sign_req, rego.* (the policy reading itself),
// graphql.*, the deprecated builtins Rego v1 refuses anyway, and OPA's
// internal test hooks; and bits.lsh, whose one call allocates n bits for a
// shift n the agent may choose (the deadline cannot stop a builtin
// midway). The time.* functions listed take the time as an
// argument; with a named zone they use the machine's zone database.
var allowedBuiltins = []string{
	// operators (infix forms included: `in` is internal.member_2/3)
	"and", "assign", "div", "eq", "equal", "gt", "gte", "lt", "lte", "minus", "mul", "neq", "or",
	"plus", "rem", "internal.member_2", "internal.member_3", "internal.template_string",
	// numbers and aggregates
	"abs", "ceil", "floor", "round", "to_number", "format_int", "numbers.range", "numbers.range_step",
	"bits.and", "bits.negate", "bits.or", "bits.rsh", "bits.xor",
	"count", "max", "min", "product", "sort", "sum",
	// arrays, sets, objects
	"array.concat", "array.flatten", "array.reverse", "array.slice", "intersection", "union",
	"object.filter", "object.get", "object.keys", "object.remove", "object.subset", "object.union",
	"object.union_n", "json.filter", "json.patch", "json.remove", "walk", "graph.reachable",
	"graph.reachable_paths",
	// strings
	"concat", "contains", "endswith", "indexof", "indexof_n", "lower", "replace", "split", "sprintf",
	"startswith", "strings.any_prefix_match", "strings.any_suffix_match", "strings.count",
	"strings.render_template", "strings.replace_n", "strings.reverse", "strings.split_n", "substring",
	"trim", "trim_left", "trim_prefix", "trim_right", "trim_space", "trim_suffix", "upper",
	"regex.find_all_string_submatch_n", "regex.find_n", "regex.globs_match", "regex.is_valid",
	"regex.match", "regex.replace", "regex.split", "regex.template_match", "glob.match", "glob.quote_meta",
	"semver.compare", "semver.is_valid", "units.parse", "units.parse_bytes",
	// types
	"is_array", "is_boolean", "is_null", "is_number", "is_object", "is_set", "is_string", "type_name",
	// encodings
	"base64.decode", "base64.encode", "base64.is_valid", "base64url.decode", "base64url.encode",
	"base64url.encode_no_pad", "hex.decode", "hex.encode", "json.is_valid", "json.marshal",
	"json.marshal_with_options", "json.unmarshal", "yaml.is_valid", "yaml.marshal", "yaml.unmarshal",
	"urlquery.decode", "urlquery.decode_object", "urlquery.encode", "urlquery.encode_object",
	"uri.is_valid", "uri.parse",
	// hashes
	"crypto.md5", "crypto.sha1", "crypto.sha256", "crypto.hmac.equal", "crypto.hmac.md5",
	"crypto.hmac.sha1", "crypto.hmac.sha256", "crypto.hmac.sha512",
	// time given as an argument (never the clock)
	"time.add_date", "time.clock", "time.date", "time.diff", "time.format", "time.parse_duration_ns",
	"time.parse_ns", "time.parse_rfc3339_ns", "time.weekday",
}

var allowedSet = func() map[string]bool {
	m := make(map[string]bool, len(allowedBuiltins))
	for _, name := range allowedBuiltins {
		m[name] = true
	}
	return m
}()

// AllowedBuiltin reports whether lineage's Rego may use the OPA builtin name.
func AllowedBuiltin(name string) bool {
	return allowedSet[name]
}

// Capabilities are OPA's capabilities for this version with only the allowed
// builtins: the compiler and the runtime both give them to OPA, so OPA itself
// refuses any route to another builtin (a call, a `with` value, a reference).
// Each call returns a fresh value the caller may extend (with its own
// builtins, such as lineage.cel).
func Capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	keep := make([]*ast.Builtin, 0, len(allowedBuiltins)+1)
	for _, b := range caps.Builtins {
		if AllowedBuiltin(b.Name) && !b.Nondeterministic {
			keep = append(keep, b)
		}
	}
	caps.Builtins = keep
	return caps
}

// WithArgsSchemas adds to caps json.match_schema, for the generated policy
// module's argument schemas (docs/policy.md#argument-schemas), with no
// network: the compiler admits only local $ref, and no host is allowed a
// fetch besides. Extensions may still not call it (it is not in the
// allowlist: the compiler reports their uses).
func WithArgsSchemas(caps *ast.Capabilities) *ast.Capabilities {
	caps.Builtins = append(caps.Builtins, ast.JSONMatchSchema)
	caps.AllowNet = []string{}
	return caps
}
