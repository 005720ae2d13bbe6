package source

import (
	"fmt"
	"strings"

	"github.com/lineage-guard/lineage/internal/jsontext"
)

// maxNumberLen bounds the text of one number: arbitrary-precision arithmetic
// on longer ones (as schema validation does) costs time for nothing.
const maxNumberLen = 100

// numberProblem returns why the JSON number text s cannot be accepted, or "".
// It is the rule every JSON the project reads follows, D231 (numbers a double
// holds): a policy's `cost: 100.000000000000001` or `1e400` is refused where
// it is written, as a request's would be.
func numberProblem(s string) string {
	if len(s) > maxNumberLen {
		return fmt.Sprintf("number %s is too long (%d characters, at most %d)", abbreviate(s, 40), len(s), maxNumberLen)
	}
	if p := jsontext.NumberProblem(s); p != "" {
		return "number " + s + " " + p
	}
	return ""
}

// yamlFloatJSON rewrites a YAML 1.2 float in decimal notation
// ([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, underscores allowed)
// as a JSON number with the same value, keeping the text otherwise as written.
// It reports false for anything else.
func yamlFloatJSON(s string) (string, bool) {
	s = strings.ReplaceAll(s, "_", "")
	var b strings.Builder
	if s != "" && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			b.WriteByte('-')
		}
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i:]
	}
	intPart, frac, hasPoint := mant, "", false
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac, hasPoint = mant[:i], mant[i+1:], true
	}
	if !allDigits(intPart) || !allDigits(frac) || (intPart == "" && frac == "") {
		return "", false
	}
	if exp != "" {
		e := exp[1:]
		if e != "" && (e[0] == '+' || e[0] == '-') {
			e = e[1:]
		}
		if e == "" || !allDigits(e) {
			return "", false
		}
	}
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	b.WriteString(intPart)
	if hasPoint {
		if frac == "" {
			frac = "0"
		}
		b.WriteByte('.')
		b.WriteString(frac)
	}
	b.WriteString(exp)
	return b.String(), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
