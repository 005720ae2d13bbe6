package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
)

// TestCheckArgsJSON: the scan of canonical args accepts exactly what
// checkValue accepts once they are decoded, and a refusal names the same
// fault (D192: the args checks, by a scan).
func TestCheckArgsJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	deepArray := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}" }
	cases := []string{
		`{"a":1}`, `{"a":"x\"y\\\\","b":[1,-2,3.5,1e-7,true,false,null]}`, `{"":{}}`, `{"a":"\u00e9","b":"☃"}`,
		`{"n":9007199254740992}`, `{"n":-9007199254740992}`, `{"n":9007199254740993}`, `{"n":-9007199254740993}`,
		`{"n":1e+21}`, `{"n":9007199254740991.5}`, `{"n":1.5e308}`, `{"n":1e400}`, `{"n":123456789012345678901234}`,
		`{"s":"9007199254740993"}`, `{"s":"1e400","t":"[[[["}`, `{"k\"e":"}{"}`,
		deep(MaxArgsDepth), deep(MaxArgsDepth + 1), deepArray(MaxArgsDepth), deepArray(MaxArgsDepth + 1),
		`{"a": 1}`, `{"a":1`, `[1]`, `"x"`, `{"a":1}{}`, `{"a":01}`, ``,
	}
	// Decoding accepts these, but no request's canonical args are written so:
	// invalid UTF-8 (checkValue refuses it in a request's strings; canonical
	// JSON writes U+FFFD) and space before the object.
	notCanonical := []string{`{"a":"` + "\xff" + `"}`, ` {"a":1}`}
	for _, c := range notCanonical {
		if err := checkArgsJSON([]byte(c)); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("%q: %v", c, err)
		}
	}
	for _, c := range cases {
		err := checkArgsJSON([]byte(c))
		var args map[string]any
		dec := json.NewDecoder(bytes.NewReader([]byte(c)))
		dec.UseNumber()
		want := dec.Decode(&args)
		if want == nil && (dec.More() || args == nil) {
			want = errors.New("not one object")
		}
		if want == nil {
			want = checkValue(args)
		}
		switch {
		case want == nil && err != nil:
			t.Errorf("%.60q: refused (%v), checkValue accepts it", c, err)
		case want != nil && err == nil:
			t.Errorf("%.60q: accepted, checkValue refuses it: %v", c, want)
		case err != nil && !errors.Is(err, lineage.ErrBadRequest):
			t.Errorf("%.60q: %v is not a bad request", c, err)
		case want != nil && err != nil && errors.Is(want, lineage.ErrBadRequest) && want.Error() != err.Error():
			t.Errorf("%.60q: %v, checkValue says %v", c, err, want)
		}
	}
}
