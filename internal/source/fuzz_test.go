package source

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lineage-guard/lineage/internal/diag"
)

// FuzzLoad checks that no input makes Load or Validate panic, that a load
// error means no value, and that every value loaded is plain JSON.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		for _, file := range corpusFiles(f, filepath.Join(corpus, dir)) {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(filepath.Base(file), data)
		}
	}
	f.Add("x.json", []byte(`{"a": [1, "b", null, true, {"c": 1.5e3}]}`))
	f.Add("x.yaml", []byte("a: &a {b: 1}\nc: {<<: *a, d: [*a]}\n"))
	f.Fuzz(func(t *testing.T, file string, data []byte) {
		d, diags := Load(file, data)
		if d == nil {
			t.Fatal("nil Document")
		}
		if len(diags) > 0 && d.Value != nil {
			t.Fatalf("diagnostics %v with a value %#v", diags, d.Value)
		}
		for _, x := range diags {
			if strings.Contains(x.Message, "internal error") {
				t.Fatalf("Load: %v", x)
			}
			_ = x.String()
		}
		if d.Value != nil {
			if _, err := json.Marshal(d.Value); err != nil {
				t.Fatalf("value does not marshal: %v", err)
			}
		}
		if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(data) <= MaxBytes && len(trimmed) > 0 &&
			(trimmed[0] == '{' || trimmed[0] == '[') && json.Valid(data) && utf8.Valid(data) {
			// What encoding/json accepts, Load parses (it may still refuse
			// duplicate keys, deep nesting and inexact numbers).
			for _, x := range diags {
				if x.Code == diag.CodeSyntax {
					t.Fatalf("valid JSON refused: %v", x)
				}
			}
		}
		if len(diags) > 0 {
			return
		}
		for _, x := range Validate(d, "policy") {
			if strings.Contains(x.Message, "internal error") {
				t.Fatalf("Validate: %v", x)
			}
			if x.File != file {
				t.Fatalf("diagnostic names file %q, want %q", x.File, file)
			}
		}
		for p := range d.pos {
			_ = d.Pos(p)
			_ = d.KeyPos(p)
			if _, ok := lookup(d.Value, p); !ok {
				t.Fatalf("position recorded for %q, which is not in the value", p)
			}
		}
		if sub := d.Sub(""); sub == nil {
			t.Fatal("Sub(\"\") is nil")
		}
	})
}
