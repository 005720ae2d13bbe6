package source

import (
	"fmt"
	"strings"

	"github.com/lineage-guard/lineage/internal/strictjson"
)

// maxNumberLen bounds the text of one number: arbitrary-precision arithmetic
// on longer ones (as schema validation does) costs time for nothing.
const maxNumberLen = 100

// numberProblem returns why the JSON number text s cannot be accepted, or "".
// It is the rule every JSON the project reads follows, D231 (numbers a double
// holds): a policy's `cost: 100.000000000000001` or `1e400` is refused where
// it is written, as a request's would be.
//
// exact picks exactProblem's rule instead, for a number the document's reader
// keeps as written (LoadOptions.Exact).
func numberProblem(s string, exact bool) string {
	if len(s) > maxNumberLen {
		return fmt.Sprintf("number %s is too long (%d characters, at most %d)", abbreviate(s, 40), len(s), maxNumberLen)
	}
	if exact {
		return exactProblem(s)
	}
	if p := strictjson.NumberProblem(s); p != "" {
		// A request's number may travel as a string; a policy's may not.
		return "number " + s + " " + strings.TrimSuffix(p, "; send it as a string")
	}
	return ""
}

// limit2p53 is 2^53, the largest magnitude up to which every integer is
// exactly representable as a float64 (and so in any JSON implementation).
const limit2p53 = "9007199254740992"

// exactProblem is the rule for a number its reader keeps as written (an
// exact decimal, never a double: a case file's times to the nanosecond): its
// magnitude at most 2^53 and not so close to zero that a double would lose it.
func exactProblem(s string) string {
	if e := writtenExponent(s); e > 1000 || e < -1000 {
		return fmt.Sprintf("number %s has an exponent out of range", s)
	}
	point, digits := magnitude(s)
	switch {
	case exceeds(point, digits):
		return fmt.Sprintf("number %s exceeds 2^53, not exactly representable", s)
	case digits != "" && point < -323:
		return fmt.Sprintf("number %s is too close to zero to be represented", s)
	}
	return ""
}

func writtenExponent(s string) int {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		return parseExp(s[i+1:])
	}
	return 0
}

// magnitude writes the number s as 0.<digits> × 10^point with a non-zero first
// digit ("" digits for zero).
func magnitude(s string) (point int, digits string) {
	s = strings.TrimLeft(s, "+-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		exp = parseExp(s[i+1:])
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	digits = intPart + frac
	point = len(intPart) + exp // the decimal point sits after this many digits
	z := len(digits) - len(strings.TrimLeft(digits, "0"))
	digits, point = strings.TrimRight(digits[z:], "0"), point-z
	return point, digits
}

func exceeds(point int, digits string) bool {
	if digits == "" {
		return false // zero
	}
	switch {
	case point > len(limit2p53):
		return true
	case point < len(limit2p53):
		return false
	}
	head := digits
	if len(head) > len(limit2p53) {
		head = head[:len(limit2p53)]
	} else {
		head += strings.Repeat("0", len(limit2p53)-len(head))
	}
	if head != limit2p53 {
		return head > limit2p53
	}
	return len(digits) > len(head) // digits has no trailing zeros
}

// parseExp parses an exponent, saturating far beyond any meaningful value.
func parseExp(s string) int {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	e := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		if e < 1<<30 {
			e = e*10 + int(c-'0')
		}
	}
	if neg {
		return -e
	}
	return e
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
