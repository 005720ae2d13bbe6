package strictjson

import (
	"math"
	"strconv"
)

// NumberProblem says what is wrong with the JSON number literal s under D231 (numbers a double holds)
// (numbers a double holds): the shortest decimal that identifies its nearest
// double (the form RFC 8785 writes) must have the same value as s, compared
// digit by digit, never after rounding; and an integer beyond ±2^53 is not
// kept exactly by every reader. It returns "" for a good number.
// 100.000000000000001 (more digits than a double keeps), 1e-400 (underflow)
// and 1e400 (overflow) are refused; 0.1, 1.0, 1e2, -2.5e-3 and -0 pass.
func NumberProblem(s string) string {
	if plainInt(s) {
		if len(s) <= 15 { // the common case
			return ""
		}
		if n, err := strconv.ParseInt(s, 10, 64); err != nil || n > 1<<53 || n < -(1<<53) {
			return "exceeds 2^53 and cannot be kept exactly; send it as a string"
		}
		return ""
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if math.IsInf(f, 0) {
			return "is beyond the range of a double"
		}
		return "is not a JSON number"
	}
	if math.Abs(f) > 1<<53 {
		return "exceeds 2^53 and cannot be kept exactly; send it as a string"
	}
	neg, digits, exp, ok := decimal(s)
	if !ok {
		return "has more digits than a double keeps; send it as a string"
	}
	var buf [32]byte
	short := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	sneg, sdigits, sexp, _ := decimal(string(short))
	if len(digits) == 0 { // zero, or -0: the number 0
		if f != 0 {
			return "is not a JSON number"
		}
		return ""
	}
	if f == 0 {
		return "is too small for a double: it would be read as 0"
	}
	if neg != sneg || digits != sdigits || exp != sexp {
		return "has more digits than a double keeps: it would be read as " + string(strconv.AppendFloat(buf[:0], f, 'g', -1, 64)) + "; send it as a string"
	}
	return ""
}

func plainInt(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i == len(s) {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// decimal writes the value of a number literal as 0.DIGITS × 10^exp with no
// leading or trailing zero in DIGITS ("" for zero). ok is false when there are
// more than 17 significant digits, which no shortest double form has.
func decimal(s string) (neg bool, digits string, exp int, ok bool) {
	var buf [17]byte
	n, zeros := 0, 0 // digits kept, zeros seen after them but not yet kept
	point := 0       // the position of the decimal point among the digits
	seenPoint := false
	i := 0
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			seenPoint = true
			continue
		case c == 'e' || c == 'E':
			e, err := strconv.Atoi(s[i+1:])
			if err != nil {
				if n == 0 {
					return neg, "", 0, true // 0e999999999999 is 0
				}
				return neg, "", 0, false
			}
			exp = e
			i = len(s)
			continue
		case c < '0' || c > '9':
			return neg, "", 0, false
		}
		if !seenPoint {
			point++
		}
		if c == '0' {
			if n == 0 { // a leading zero: it moves the point, nothing else
				point--
				continue
			}
			zeros++
			continue
		}
		if n+zeros+1 > len(buf) {
			return neg, "", 0, false
		}
		for ; zeros > 0; zeros-- {
			buf[n] = '0'
			n++
		}
		buf[n] = c
		n++
	}
	if n == 0 {
		return false, "", 0, true
	}
	return neg, string(buf[:n]), exp + point, true
}
