package canon

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// TestSameAsJCS: Transform writes what jcs.Transform writes, byte for byte,
// and fails where it fails: RFC 8785's examples, keys that sort differently
// by UTF-16 than by UTF-8 (beyond the BMP against U+E000-U+FFFF), numbers,
// escapes, duplicates, damaged text, and random objects.
func TestSameAsJCS(t *testing.T) {
	cases := []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
		`{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ignore locale"}`,
		`[56,{"d":true,"10":null,"1":[]}]`,
		`{"a":1,"b":{"y":[{"q":1,"p":2}],"x":"\u0000"}}`,
		` { "b" : 1 , "a" : 2 } `,
		`"just a string"`, `123`, `1.5e300`, `-0`, `true`, `null`, `[]`, `{}`,
		`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`, `{"a":`, `{"a" 1}`, `[1,]`, `{"a":1}x`, `{"\ud800":1}`, `"\x"`, ``,
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "z", "A", "0", "é", "\u20ac", "\ufb33", "\U0001F600", "\U00010000", "\uE000", "\\n", "\\u00e9"}
	key := func() string {
		var b strings.Builder
		for n := r.IntN(4); n >= 0; n-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	var value func(depth int) string
	value = func(depth int) string {
		switch k := r.IntN(6); {
		case depth > 2 || k == 0:
			return fmt.Sprint(r.IntN(2000) - 1000)
		case k == 1:
			return fmt.Sprintf("%q", key())
		case k == 2:
			return fmt.Sprintf("[%s,%s]", value(depth+1), value(depth+1))
		default:
			var parts []string
			for n := r.IntN(30); n >= 0; n-- {
				parts = append(parts, fmt.Sprintf("%q:%s", key(), value(depth+1)))
			}
			return "{" + strings.Join(parts, ",") + "}"
		}
	}
	for i := 0; i < 500; i++ {
		cases = append(cases, value(0))
	}
	var objects, dups int
	for _, c := range cases {
		want, wantErr := jcs.Transform([]byte(c))
		got, err := Transform([]byte(c))
		if (err != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Errorf("Transform(%s)\n = %s, %v\nwant %s, %v", c, got, err, want, wantErr)
		}
		if strings.HasPrefix(c, "{") {
			objects++
			if wantErr != nil && strings.Contains(wantErr.Error(), "Duplicate") {
				dups++
			}
		}
	}
	if objects < 100 || dups == 0 {
		t.Errorf("%d objects, %d with duplicate keys: the cases do not exercise the sort", objects, dups)
	}
}

// BenchmarkTransform: an object of 10,000 members, in the order encoding/json
// writes them (sorted), was jcs's worst case.
func BenchmarkTransform(b *testing.B) {
	var parts []string
	for i := 0; i < 10000; i++ {
		parts = append(parts, fmt.Sprintf(`"tool_%05d":{"cost":%d}`, i, i))
	}
	doc := []byte("{" + strings.Join(parts, ",") + "}")
	for i := 0; i < b.N; i++ {
		if _, err := Transform(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDigest(t *testing.T) {
	const empty = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if got := Digest(nil); got != empty {
		t.Errorf("Digest(nil) = %s", got)
	}
	var buf [DigestLen]byte
	if got := AppendDigest(buf[:0], [32]byte{}); len(got) != DigestLen || &got[0] != &buf[0] {
		t.Errorf("AppendDigest does not write into the buffer it is given")
	}
	a, err := DigestOf(map[string]any{"b": 1.0, "a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if b := Digest([]byte(`{"a":"x","b":1}`)); a != b {
		t.Errorf("DigestOf = %s, want the digest of the canonical form %s", a, b)
	}
}
