package runtime_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/lineage-guard/lineage/runtime"
)

// FuzzDecodeJSON: the strict decoder never panics, refuses whatever
// encoding/json refuses, and where it accepts, it decodes exactly what
// encoding/json does (it only refuses more: duplicates, lone surrogates).
// Seeds run with go test; `go test -fuzz FuzzDecodeJSON ./runtime` explores.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"s":"\ud800"}`, `{"s":"\ud83d\ude00"}`, `[1,{"x":[null,true,"\\u0041"]}]`,
		`{"a":{"b":{"c":1.5e3}}}`, `"\u00e9"`, `{"k":"v"} x`, "{\"\xff\":1}", `{"\\":"\\\\ud800"}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := runtime.DecodeJSON(data)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		stdErr := dec.Decode(&want)
		if stdErr == nil && dec.More() {
			stdErr = json.Unmarshal(data, new(any)) // trailing data
		}
		if err != nil {
			return
		}
		if stdErr != nil {
			t.Fatalf("DecodeJSON accepted %q, which encoding/json refuses: %v", data, stdErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeJSON(%q) = %#v, encoding/json %#v", data, got, want)
		}
	})
}
