package runtime_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// TestDecodeJSONStrict: the one decoder of request JSON text refuses what
// encoding/json lets through silently (docs/decision-order.md): duplicate keys at any depth
// and lone surrogates, escaped or raw.
func TestDecodeJSONStrict(t *testing.T) {
	bad := map[string]string{
		`{"a":1,"a":2}`:                   "/a",
		`{"x":{"b":1,"b":1}}`:             "/x/b",
		`{"x":[{"k":1},{"k":2,"k":3}]}`:   "/x/1/k",
		`{"s":"\ud800"}`:                  "/s",
		`{"s":"a\udc00b"}`:                "/s",
		`{"s":"\ud800\u0041"}`:            "/s",
		`{"s":"\ud800\\udc00"}`:           "/s",
		`{"\udfff":1}`:                    "lone surrogate",
		`{"s":["ok","\uD83D"]}`:           "/s/1",
		"{\"s\":\"\xed\xa0\x80\"}":        "UTF-8",
		"{\"s\":\"\xff\"}":                "UTF-8",
		`{"a":1}{"b":2}`:                  "after",
		`[1,2`:                            "not JSON",
		`{"a":1,"b":{"c":2,"c":{"d":3}}}`: "/b/c",
	}
	for text, where := range bad {
		v, err := runtime.DecodeJSON([]byte(text))
		if !errors.Is(err, lineage.ErrBadRequest) || !strings.Contains(err.Error(), where) {
			t.Errorf("DecodeJSON(%q) = %v, %v; want bad_request naming %q", text, v, err, where)
		}
		if m, err := runtime.ParseArgs(text); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("ParseArgs(%q) = %v, %v; want bad_request", text, m, err)
		}
	}
	good := map[string]any{
		`{"s":"\ud83d\ude00"}`:      map[string]any{"s": "😀"},
		`{"s":"\\ud800"}`:           map[string]any{"s": `\ud800`},
		`{"s":"\\\ud83d\ude00x"}`:   map[string]any{"s": `\😀x`},
		`{"a":{"k":1},"b":{"k":2}}`: map[string]any{"a": map[string]any{"k": json.Number("1")}, "b": map[string]any{"k": json.Number("2")}},
		`[{"k":1},{"k":1}]`:         []any{map[string]any{"k": json.Number("1")}, map[string]any{"k": json.Number("1")}},
		`{"s":"\u00e9\n"}`:          map[string]any{"s": "é\n"},
	}
	for text, want := range good {
		got, err := runtime.DecodeJSON([]byte(text))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeJSON(%q) = %#v, %v; want %#v", text, got, err, want)
		}
	}
}

// TestDecodeRequest: a request body as the service receives it.
func TestDecodeRequest(t *testing.T) {
	req, err := runtime.DecodeRequest([]byte(`{"id":"r1","tool":"pay","args":{"n":1},"at":"2026-01-01T00:00:01.5Z"}`))
	want := lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": json.Number("1")}, At: sec(1.5)}
	if err != nil || !reflect.DeepEqual(req, want) {
		t.Fatalf("DecodeRequest = %+v, %v; want %+v", req, err, want)
	}
	for _, text := range []string{
		`{"tool":"pay","tool":"pay"}`, `{"tool":"pay","args":{"a":1,"a":1}}`, `{"tool":"pay","args":[]}`,
		`{"tool":1}`, `{"tool":"pay now"}`, `{}`, `{"tool":"pay","id":7}`, `{"tool":"pay","extra":1}`,
		`{"tool":"pay","at":"2318-01-01T00:00:00Z"}`, `{"tool":"pay","at":"yesterday"}`, `{"tool":"pay","at":5}`,
		`{"tool":"pay","args":{"s":"\udead"}}`, `[]`,
	} {
		if req, err := runtime.DecodeRequest([]byte(text)); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("DecodeRequest(%s) = %+v, %v; want bad_request", text, req, err)
		}
	}
}
