package strictjson

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestNumberRule pins D231 (numbers a double holds): the value the shortest
// double form writes must be the value as written.
func TestNumberRule(t *testing.T) {
	good := []string{"0", "-0", "0.0", "-0.0", "0.1", "1.0", "1e2", "1E+2", "-2.5e-3", "100", "9007199254740992",
		"-9007199254740992", "5e-324", "9.007199254740992e15", "123456789.125", "0.30000000000000004", "1.50000000000000000000", "0e999999999999999999"}
	bad := []string{"100.000000000000001", "1e-400", "1e400", "-1e400", "9007199254740993", "9007199254740994",
		"1e300", "0.1000000000000000055511151231257827", "4.9e-325", "12345678901234567890", "1e99999999999999999999"}
	for _, s := range good {
		if p := NumberProblem(s); p != "" {
			t.Errorf("NumberProblem(%s) = %q, want none", s, p)
		}
	}
	for _, s := range bad {
		if p := NumberProblem(s); p == "" {
			t.Errorf("NumberProblem(%s) accepts it", s)
		}
	}
}

func TestDecode(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"a":2}`:             `/a: duplicate key "a"`,
		`{"a":{"b":1,"b":2}}`:       `/a/b: duplicate key`,
		`{"a":"\ud800"}`:            "lone surrogate",
		`{"\udc00":1}`:              "lone surrogate",
		"{\"a\":\"\xff\"}":          "not valid UTF-8",
		`{"a":100.000000000000001}`: "/a: number 100.000000000000001 has more digits",
		`{"a":[1e-400]}`:            "/a/0: number 1e-400 is too small",
		`{"a":1e400}`:               "/a: number 1e400 is beyond the range",
		`{"a":1} x`:                 "unexpected data after",
		`{"a":1`:                    "not JSON",
		`[[[[[[1]]]]]]`:             "nested deeper than 5",
	} {
		_, err := Decode([]byte(in), 5)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) = %v, want %q", in, err, want)
		}
	}
	v, err := Decode([]byte(`{"Tool":1,"tool":"x","a":[1.0,true,null]}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["Tool"] != json.Number("1") || m["tool"] != "x" || m["a"].([]any)[0] != json.Number("1.0") {
		t.Errorf("Decode = %#v", v)
	}
}

// TestUnmarshalExactNames pins D232 (member names matched exactly): a
// member that differs from a field's name only in case or by a look-alike
// letter is unknown, never that field.
func TestUnmarshalExactNames(t *testing.T) {
	type body struct {
		Tool string         `json:"tool"`
		Args map[string]any `json:"args"`
	}
	for in, want := range map[string]string{
		`{"tool":"pay","Tool":"read"}`:    "/Tool: unknown field",
		`{"TOOL":"read"}`:                 "/TOOL: unknown field",
		`{"tool":"x","argſ":{}}`:          "/argſ: unknown field",
		`{"tool":5}`:                      "/tool: expected a string",
		`{"tool":"x","args":[1]}`:         "/args: expected an object",
		`{"tool":"x","args":{"a":1e400}}`: "/args/a: number 1e400",
		`{"tool":"x","tool":"y"}`:         "/tool: duplicate key",
		`[]`:                              "must be a JSON object",
	} {
		var b body
		err := Unmarshal([]byte(in), &b, 0)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Unmarshal(%s) = %v, want %q", in, err, want)
		}
	}
	var b body
	if err := Unmarshal([]byte(`{"tool":"pay","args":{"n":1.50,"o":{"p":[2]}}}`), &b, 0); err != nil {
		t.Fatal(err)
	}
	if b.Tool != "pay" || b.Args["n"] != json.Number("1.50") {
		t.Errorf("Unmarshal = %#v", b)
	}
}

// TestNumberRuleAgainstBigRat holds NumberProblem's digit comparison equal to
// an exact comparison with math/big on random literals.
func TestNumberRuleAgainstBigRat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteByte('-')
		}
		b.WriteString(strconv.Itoa(rng.IntN(1000)))
		if rng.IntN(2) == 0 {
			b.WriteByte('.')
			for range 1 + rng.IntN(20) {
				b.WriteByte(byte('0' + rng.IntN(10)))
			}
		}
		if rng.IntN(2) == 0 {
			fmt.Fprintf(&b, "e%d", rng.IntN(660)-330)
		}
		s := b.String()
		want := true
		f, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil || math.Abs(f) > 1<<53:
			want = false
		default:
			written, _ := new(big.Rat).SetString(s)
			held, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
			want = written.Cmp(held) == 0
		}
		if got := NumberProblem(s) == ""; got != want {
			t.Fatalf("NumberProblem(%s) accepts = %v, want %v (%q)", s, got, want, NumberProblem(s))
		}
	}
}

// TestUnmarshalOpen: a member the struct has no field for is skipped, one
// that differs from a field only in case is skipped too (never bound to it),
// and duplicates, invalid Unicode and inexact numbers are still refused.
func TestUnmarshalOpen(t *testing.T) {
	var v struct {
		Tool string `json:"tool"`
		Args any    `json:"args"`
	}
	if err := UnmarshalOpen([]byte(`{"tool":"pay","Tool":"evil","session":{"x":[1,2]},"args":{"a":1.5}}`), &v, 0); err != nil || v.Tool != "pay" {
		t.Fatalf("open: %v %+v", err, v)
	}
	v.Tool = ""
	if err := UnmarshalOpen([]byte(`{"Tool":"evil"}`), &v, 0); err != nil || v.Tool != "" {
		t.Errorf("Tool bound to tool: %v %+v", err, v)
	}
	for _, bad := range []string{`{"tool":"a","tool":"b"}`, `{"tool":"\ud800"}`, `{"args":{"a":100.000000000000001}}`, `{"x":1,"x":2}`} {
		if err := UnmarshalOpen([]byte(bad), &v, 0); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
