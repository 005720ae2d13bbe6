package runtime

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/lineage-guard/lineage"
)

// TestCanonicalBodies holds the bodies the runtime writes without the JCS
// library to the library's own output, over random contents that include every
// kind of character JSON escapes differently somewhere.
func TestCanonicalBodies(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "/", "<", ">", "&", "\b", "\f", "\n", "\r", "\t",
		"\x00", "\x1f", "\x7f", "é", "€", "\u2028", "\u2029", "\ufeff", "𝄞", "\uffff", "\\u2028", "\xff", "\xe2\x80", "\xed\xa0\x80"}
	str := func() string {
		var b strings.Builder
		for n := r.IntN(8); n > 0; n-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := 0; i < 5000; i++ {
		v := lineage.Verdict{Decision: lineage.Deny, Reason: str(), Cost: int64(r.IntN(1 << 20)),
			RequestID: str(), Seq: r.Uint64() >> 12, Terminated: []lineage.Termination{"", lineage.ScarLimitReached}[r.IntN(2)]}
		if r.IntN(2) == 0 {
			v.Scar = &lineage.Scar{Severity: lineage.Severe, Weight: int64(r.IntN(100))}
		}
		args := map[string]any{str(): str(), "n": json.Number("12.5"), str(): []any{str(), true, nil}}
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		canonArgs, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		items := []item{
			{kind: lineage.KindAction, args: canonArgs, body: &lineage.ActionBody{
				Request: lineage.RecordedRequest{ID: str(), Tool: "pay", Args: args}, Verdict: v}},
			{kind: lineage.KindApproval, body: &lineage.ApprovalBody{RequestID: str(), Approver: str(), Approved: r.IntN(2) == 0, Verdict: v}},
			{kind: lineage.KindTermination, body: &lineage.TerminationBody{Reason: lineage.Killed, By: str(), Note: str()}},
		}
		for _, it := range items {
			got, direct := appendCanonicalBody(nil, it)
			if !direct {
				t.Fatalf("%s body was not written directly", it.kind)
			}
			// The library's canonical form of the body struct itself.
			raw, err := json.Marshal(it.body)
			if err != nil {
				t.Fatal(err)
			}
			want, err := jcs.Transform(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s body is not the canonical JSON of the body:\n got  %s\n want %s", it.kind, got, want)
			}
		}
	}
}

// TestCanonicalArgs holds the args the runtime canonicalizes without the JCS
// library to the library's output, over random args of every JSON shape,
// including numbers and strings that only the library writes right.
func TestCanonicalArgs(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	keys := []string{"a", "b", "Z", "é", "\u00ff", "\ud7ff", "\ue000", "\uffff", "𝄞", "a\u2028", "<&>", ""}
	nums := []string{"0", "-1", "7", "9007199254740992", "-9007199254740992", "1.5", "-0", "1e3", "0.1", "1.0", "100", "-0.0", "2.50"}
	strs := []string{"x", "\u2028", "\u2029", "<tag>&amp;", "tab\t", "nul\x00", "quote\"", "é€𝄞", ""}
	var gen func(depth int) any
	gen = func(depth int) any {
		switch r.IntN(8) {
		case 0:
			return json.Number(nums[r.IntN(len(nums))])
		case 1:
			return strs[r.IntN(len(strs))]
		case 2:
			return r.IntN(2) == 0
		case 3:
			return nil
		case 4:
			// Go integers of every kind, at the edges of what is accepted.
			return []any{int64(r.IntN(1000) - 500), int(1 << 53), int(-(1 << 53)), int32(math.MinInt32), uint32(math.MaxUint32),
				int8(-128), uint8(255), int16(math.MaxInt16), uint16(math.MaxUint16), int64(1 << 53)}[r.IntN(10)]
		case 5:
			if depth > 3 {
				return "leaf"
			}
			var a []any
			for n := r.IntN(3); n > 0; n-- {
				a = append(a, gen(depth+1))
			}
			return a
		default:
			if depth > 3 {
				return "leaf"
			}
			m := map[string]any{}
			for n := r.IntN(4); n > 0; n-- {
				m[keys[r.IntN(len(keys))]] = gen(depth + 1)
			}
			return m
		}
	}
	plain := 0
	for i := 0; i < 20000; i++ {
		args := map[string]any{}
		for n := 1 + r.IntN(4); n > 0; n-- {
			args[keys[r.IntN(len(keys))]] = gen(1)
		}
		got, err := canonicalArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("args %s:\n got  %s\n want %s", raw, got, want)
		}
		if plainJSON(args) {
			plain++
		}
	}
	if plain < 2000 {
		t.Fatalf("only %d args took the direct path; the test must exercise it", plain)
	}
}

// TestDecodedPlain: copying plain args is the same as decoding their
// canonical JSON, which is what the state keeps of a pending request.
func TestDecodedPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 5000; i++ {
		args := map[string]any{
			"n": []any{int(r.IntN(1 << 20)), int8(-3), uint16(7), int64(-(1 << 53)), json.Number("42")},
			"s": "x\u2028y", "b": r.IntN(2) == 0, "z": nil, "e": []any(nil), "m": map[string]any(nil),
			"o": map[string]any{"k": []any{map[string]any{"deep": uint32(r.Uint32())}}},
		}
		canon, err := canonicalArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(canon))
		dec.UseNumber()
		var want map[string]any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if got := decodedPlain(args); !reflect.DeepEqual(got, any(want)) {
			t.Fatalf("decodedPlain(%v) = %#v, want %#v", args, got, want)
		}
	}
}
