package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxArgsDepth is the deepest nesting of args a request may have.
const maxArgsDepth = 32

// normalizeArgs turns a request's args into the JSON value the log records:
// absent args are {} (D15: a request without 'args' is recorded with 'args: {}'), and any Go value is what its JSON encoding decodes to
// (objects map[string]any, arrays []any, numbers json.Number with the text
// encoding/json writes, strings, bools, nil). A json.Number keeps its text: "1"
// and "1.0" stay different texts (an int and a double for CEL, docs/policy.md), although they
// are the same JSON value for id comparisons (jsonEqual).
//
// Refused (the request is malformed, docs/decision-order.md):
//   - args encoding/json cannot encode (channels, NaN, a json.Number that is not
//     a JSON number, a cycle, ...);
//   - a number beyond float64's range (|x| rounding to infinity, e.g. 1e400):
//     Choice: such a number has no canonical JSON form (RFC 8785 numbers are
//     IEEE-754 doubles), so it cannot be recorded;
//   - nesting deeper than maxArgsDepth. Choice: the args object itself is level
//     1 and every object or array inside adds a level; scalars add none. So {} is
//     1 level, {"a":{}} and {"a":[1]} are 2, and 32 nested containers in all
//     (args included) are the most a request may have.
func normalizeArgs(args map[string]any) (map[string]any, error) {
	if args == nil {
		return map[string]any{}, nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if out == nil { // cannot happen for a non-nil map; keep the invariant anyway
		out = map[string]any{}
	}
	if d := depth(out); d > maxArgsDepth {
		return nil, fmt.Errorf("nested %d levels deep, more than %d", d, maxArgsDepth)
	}
	if err := checkNumbers(out); err != nil {
		return nil, err
	}
	return out, nil
}

// depth is the nesting depth of a JSON value: 0 for a scalar, 1 + the deepest
// element for an object or array.
func depth(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			d = max(d, depth(e))
		}
		return d + 1
	case []any:
		for _, e := range x {
			d = max(d, depth(e))
		}
		return d + 1
	}
	return 0
}

func checkNumbers(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	case json.Number:
		if f := numberValue(x); math.IsInf(f, 0) {
			return fmt.Errorf("number %s is out of range", x)
		}
	}
	return nil
}

// numberValue is the float64 nearest to a JSON number's text (±Inf beyond range).
func numberValue(n json.Number) float64 {
	f, _ := strconv.ParseFloat(string(n), 64) // the text came from encoding/json: syntax is valid
	return f
}

// jsonEqual reports whether two normalized args values are the same JSON value,
// the comparison D3 (id conflicts) makes for id conflicts ("canonical JSON").
//
// Choice: canonical JSON is RFC 8785 (docs/log.md), whose numbers are IEEE-754
// doubles, so two numbers are equal iff they round to the same float64: 1, 1.0,
// 1e0 and 10e-1 are one value; -0 equals 0; integers beyond 2^53 that round to
// the same double are equal. Strings compare by their (UTF-8) bytes, objects by
// their key sets and values (key order never matters), arrays element-wise in
// order. Types never mix: "1" (a string) differs from 1, null from absent.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numberValue(x) == numberValue(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

// celValue converts a normalized JSON value to the Go value cel-go's default
// adapter turns into the CEL value of docs/policy.md#cel-constraints: a number whose text is integral
// (no '.', 'e' or 'E') and fits int64 is an int, any other number a double.
//
// Choice: an integral text outside int64's range (e.g. 9223372036854775808) is a
// double (the nearest float64), not an error.
func celValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i
			}
		}
		return numberValue(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = celValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = celValue(e)
		}
		return out
	}
	return v
}

// copyJSON deep-copies a normalized JSON value.
func copyJSON(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = copyJSON(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = copyJSON(e)
		}
		return out
	}
	return v
}
