// Package strictjson is the project's one strict JSON reader (read.go: Decode,
// Unmarshal; number.go: NumberProblem, D231 (numbers a double holds)). It also
// keeps LoneSurrogate, which finds the escape of a lone surrogate in raw
// JSON text: the policy and case file loader (internal/source), which reads
// with the same decoder, uses it to point at the escape the decoder refused.
package strictjson

import "strconv"

// LoneSurrogate scans JSON text (a string token with its quotes, or a whole
// document: outside strings JSON has no backslash) for a \u escape of a
// surrogate that is not half of a pair. It returns the surrogate and the
// offset of its escape, or ok == false when there is none.
func LoneSurrogate(raw []byte) (r rune, at int, ok bool) {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // \" \\ \n …: the escaped character starts no escape
			continue
		}
		r, valid := hex4(raw, i+2)
		if !valid {
			return 0, 0, false // not JSON: the decoder refuses it
		}
		switch {
		case 0xD800 <= r && r < 0xDC00:
			low, valid := hex4(raw, i+8)
			if !valid || raw[i+6] != '\\' || raw[i+7] != 'u' || low < 0xDC00 || low > 0xDFFF {
				return r, i, true
			}
			i += 11
		case 0xDC00 <= r && r <= 0xDFFF:
			return r, i, true
		default:
			i += 5
		}
	}
	return 0, 0, false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return rune(n), err == nil
}
