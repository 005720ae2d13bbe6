package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lineage-guard/lineage/internal/canon"
	"github.com/lineage-guard/lineage/internal/strictjson"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage"
)

// Limits on a request (docs/decision-order.md): larger or deeper requests are errors.
const (
	MaxRequestBytes = 64 << 10
	MaxArgsDepth    = 32
	MaxIDBytes      = 128
	// maxRecordedIDBytes is the older limit, which recorded requests meet.
	maxRecordedIDBytes = 256
)

// idPattern is a request id (docs/decision-order.md): what the HTTP API can
// put in a path as it is, so every pending request can be approved.
const idPattern = `^[A-Za-z0-9._:~-]{1,128}$, not "." or ".."`

// validID checks idPattern without a regexp.
func validID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDBytes || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '~', c == '-':
		default:
			return false
		}
	}
	return true
}

// toolNamePattern is docs/policy.md's tool name; validToolName checks it without a
// regexp, which cost a microsecond on every request.
const toolNamePattern = `^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`

func validToolName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '/' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// reservedID reports whether id has the form req_<digits> (D17: assigned ids), which the
// runtime assigns.
func reservedID(id string) bool {
	digits, ok := strings.CutPrefix(id, "req_")
	if !ok || digits == "" {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// checkedRequest is a validated request: its args in canonical JSON (for the
// log, the size limit and retries) and as a Rego value (for the query).
type checkedRequest struct {
	id        string
	tool      string
	args      map[string]any // decoded from canonical JSON on demand (argsMap)
	plain     map[string]any // the caller's args when canonical JSON decodes to the same (plainJSON)
	canonArgs []byte
	argsValue ast.Value // on demand (value)
}

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: %s", lineage.ErrBadRequest, fmt.Sprintf(format, a...))
}

var emptyObject = []byte("{}")

// emptyArgs is the args of a request without any as a Rego value: one object
// that every such request shares, as the engine's request objects are shared
// (OPA never changes a value it is given), so such a request allocates none.
var emptyArgs ast.Value = ast.NewObject()

// checkRequest validates a request; nothing about it is recorded when it fails.
func checkRequest(req lineage.Request) (*checkedRequest, error) {
	if err := checkIDTool(req.ID, req.Tool); err != nil {
		return nil, err
	}
	if len(req.Args) == 0 {
		return &checkedRequest{id: req.ID, tool: req.Tool, canonArgs: emptyObject, argsValue: emptyArgs}, nil
	}
	args := req.Args
	if err := checkValue(args); err != nil {
		return nil, err
	}
	canon, err := canonicalArgs(args)
	if err != nil {
		return nil, badRequest("args are not JSON: %v", err)
	}
	if n := len(canon) + len(req.ID) + len(req.Tool); n > MaxRequestBytes {
		return nil, badRequest("request is %d bytes, over the limit of %d", n, MaxRequestBytes)
	}
	cr := &checkedRequest{id: req.ID, tool: req.Tool, canonArgs: canon}
	if plainJSON(args) {
		cr.plain = args
	}
	return cr, nil
}

// checkIDTool checks a request's id and tool name.
func checkIDTool(id, tool string) error {
	switch {
	case tool == "":
		return badRequest("tool is required")
	case !validToolName(tool):
		return badRequest("tool name %q does not match %s", tool, toolNamePattern)
	case !utf8.ValidString(id):
		return badRequest("id is not valid UTF-8")
	case len(id) > maxRecordedIDBytes:
		return badRequest("id is %d bytes, over the limit of %d", len(id), maxRecordedIDBytes)
	}
	return nil
}

// checkNewID checks the id of a new request (D233, request ids a path can
// hold). Requests already recorded under the older rule (any UTF-8, at most
// 256 bytes) are still replayed, retried as recorded and approved, so only
// Runtime.Request and RequestOf check it, not checkIDTool.
func checkNewID(id string) error {
	if id != "" && !validID(id) {
		if len(id) > MaxIDBytes {
			return badRequest("id is %d bytes, over the limit of %d", len(id), MaxIDBytes)
		}
		return badRequest("id %q does not match %s", id, idPattern)
	}
	return nil
}

// value is the args as a Rego value, as the log records them (canonical
// numbers: 1.0 is 1), built on first use: only CEL and extensions read them.
func (cr *checkedRequest) value() (ast.Value, error) {
	if cr.argsValue != nil {
		return cr.argsValue, nil
	}
	source := any(cr.plain) // already what canonical JSON decodes to
	if cr.plain == nil {
		args, err := cr.argsMap()
		if err != nil {
			return nil, err
		}
		source = args
	}
	v, err := ast.InterfaceToValue(source)
	if err != nil {
		return nil, badRequest("args: %v", err)
	}
	cr.argsValue = v
	return v, nil
}

// argsMap decodes the canonical args (numbers as json.Number): the args as the
// log records them, owned by the runtime. Only a pending request keeps them.
func (cr *checkedRequest) argsMap() (map[string]any, error) {
	if cr.args == nil && cr.plain != nil {
		cr.args, _ = decodedPlain(cr.plain).(map[string]any)
	}
	if cr.args == nil {
		dec := json.NewDecoder(bytesReader(cr.canonArgs))
		dec.UseNumber()
		if err := dec.Decode(&cr.args); err != nil {
			return nil, badRequest("args: %v", err)
		}
	}
	return cr.args, nil
}

// canonicalArgs returns the RFC 8785 canonical JSON of checked args. Plain
// args (see plainJSON) are written directly by appendPlainJSON; anything else
// (fractions, exponents, Go floats, keys that sort differently in UTF-16) goes
// through the JCS library. TestCanonicalArgs holds the two equal.
func canonicalArgs(args map[string]any) ([]byte, error) {
	if plainJSON(args) {
		return appendPlainJSON(make([]byte, 0, 64), args), nil
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return canon.Transform(raw)
}

// plainJSON reports whether v is made only of values whose canonical JSON
// appendPlainJSON writes, and that decode back to themselves: strings,
// integers in plain decimal, booleans, null, arrays, and objects whose keys
// sort the same in UTF-8 as in UTF-16 (no code point from U+D800 up).
func plainJSON(v any) bool {
	switch x := v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint8, uint16, uint32, string:
		return true
	case json.Number:
		return plainInteger(string(x))
	case map[string]any:
		for k, e := range x {
			for _, r := range k {
				if r >= 0xD800 {
					return false
				}
			}
			if !plainJSON(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !plainJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

// decodedPlain copies a plainJSON value as decoding its canonical JSON
// (numbers as json.Number) would make it, without the JSON round trip:
// integers become json.Number, a nil slice or map null.
func decodedPlain(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return nil
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = decodedPlain(e)
		}
		return out
	case []any:
		if x == nil {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = decodedPlain(e)
		}
		return out
	case nil, bool, string, json.Number:
		return x
	}
	return json.Number(appendPlainJSON(nil, v)) // an integer of a Go type
}

// appendPlainJSON writes the canonical JSON of a plainJSON value: object
// members sorted by key (UTF-8 order, which is UTF-16 order for such keys),
// strings as RFC 8785 escapes them, integers in decimal.
func appendPlainJSON(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case string:
		return appendCanonicalString(dst, x)
	case json.Number:
		return append(dst, x...)
	case int:
		return strconv.AppendInt(dst, int64(x), 10)
	case int8:
		return strconv.AppendInt(dst, int64(x), 10)
	case int16:
		return strconv.AppendInt(dst, int64(x), 10)
	case int32:
		return strconv.AppendInt(dst, int64(x), 10)
	case int64:
		return strconv.AppendInt(dst, x, 10)
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10)
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10)
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10)
	case []any:
		if x == nil { // as encoding/json writes a nil slice
			return append(dst, "null"...)
		}
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPlainJSON(dst, e)
		}
		return append(dst, ']')
	case map[string]any:
		if x == nil {
			return append(dst, "null"...)
		}
		var small [8]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendCanonicalString(dst, k), ':')
			dst = appendPlainJSON(dst, x[k])
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("appendPlainJSON: %T is not plain JSON", v)) // plainJSON said it was
}

// plainInteger: an integer as canonical JSON writes it (no sign but a minus,
// no leading zero, not "-0"); the size was checked before.
func plainInteger(s string) bool {
	d := strings.TrimPrefix(s, "-")
	if d == "" || (d[0] == '0' && (len(d) > 1 || len(s) > 1)) {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

// checkValue walks args: only JSON values, valid UTF-8, at most MaxArgsDepth
// nested objects and arrays (args itself is the first), and numbers that
// canonical JSON keeps exactly (finite, integers within ±2^53).
func checkValue(args map[string]any) error {
	if bad := checkJSON(args, 1); bad != nil {
		at := "/args"
		for i := len(bad.path) - 1; i >= 0; i-- {
			at += "/" + escapePointer(bad.path[i])
		}
		return bad.err(at)
	}
	return nil
}

// badValue is what checkJSON found wrong, and where: the path from the bad
// value up to args (reversed), built only on the way out of a failure.
type badValue struct {
	path []string
	err  func(at string) error
}

func bad(format string, a ...any) *badValue {
	return &badValue{err: func(at string) error { return badRequest(format, append(a, at)...) }}
}

func checkJSON(v any, depth int) *badValue {
	switch x := v.(type) {
	case nil, bool:
	case string:
		if !utf8.ValidString(x) {
			return bad("invalid UTF-8 in the string at %s")
		}
	case json.Number:
		return checkNumber(string(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > 1<<53 {
			return &badValue{err: func(at string) error {
				return badRequest("number %v at %s is not exactly representable in JSON", x, at)
			}}
		}
	case float32:
		return checkJSON(float64(x), depth)
	case int8, int16, int32, uint8, uint16, uint32:
	case int:
		return checkJSON(int64(x), depth)
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			return &badValue{err: func(at string) error {
				return badRequest("number %d at %s exceeds 2^53; send it as a string", x, at)
			}}
		}
	case uint, uint64:
		if toUint(x) > 1<<53 {
			return &badValue{err: func(at string) error {
				return badRequest("number %v at %s exceeds 2^53; send it as a string", x, at)
			}}
		}
	case map[string]any:
		if depth > MaxArgsDepth {
			return bad("args nest deeper than %d levels at %s", MaxArgsDepth)
		}
		for k, e := range x {
			if !utf8.ValidString(k) {
				return bad("invalid UTF-8 in a key at %s")
			}
			if b := checkJSON(e, depth+1); b != nil {
				b.path = append(b.path, k)
				return b
			}
		}
	case []any:
		if depth > MaxArgsDepth {
			return bad("args nest deeper than %d levels at %s", MaxArgsDepth)
		}
		for i, e := range x {
			if b := checkJSON(e, depth+1); b != nil {
				b.path = append(b.path, strconv.Itoa(i))
				return b
			}
		}
	default:
		return &badValue{err: func(at string) error {
			return badRequest("value of type %T at %s is not JSON", v, at)
		}}
	}
	return nil
}

// checkNumber accepts a JSON number that canonical JSON (an IEEE double in
// shortest form) keeps exactly, by D231 (numbers a double holds): the shortest
// form of its double has its value as written, and integers stay within ±2^53.
func checkNumber(s string) *badValue {
	if p := strictjson.NumberProblem(s); p != "" {
		return &badValue{err: func(at string) error { return badRequest("number %s at %s %s", s, at, p) }}
	}
	return nil
}

func toUint(v any) uint64 {
	switch x := v.(type) {
	case uint:
		return uint64(x)
	case uint64:
		return x
	}
	return 0
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}
