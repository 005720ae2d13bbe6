package compiler_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
)

// FuzzCompile: Compile never panics; it fails with a well-formed diag.List or
// succeeds with a digest that the normalized document reproduces. Seeds: the
// loader's corpus, the goldens and the error cases. Crashers are kept under
// testdata/fuzz/FuzzCompile.
func FuzzCompile(f *testing.F) {
	var seeds []string
	for _, pat := range []string{
		"testdata/valid/*.yaml", "testdata/valid/*.json",
		"testdata/invalid/*.yaml", "testdata/invalid/*.json",
		"testdata/golden/*/policy.yaml",
		"testdata/cel/*.yaml", "testdata/cel/*.json",
		"testdata/extensions/*.yaml",
	} {
		files, err := filepath.Glob(filepath.FromSlash(pat))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, files...)
	}
	if len(seeds) < 50 {
		f.Errorf("only %d seeds", len(seeds))
	}
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := compiler.Compile("", data)
		if err != nil {
			if c != nil {
				t.Fatalf("a result and an error: %v", err)
			}
			var l diag.List
			if !errors.As(err, &l) {
				t.Fatalf("error is a %T: %v", err, err)
			}
			if len(l) == 0 {
				t.Fatal("empty diag.List")
			}
			for _, d := range l {
				if d.Code == "" || d.Message == "" {
					t.Fatalf("diagnostic without code or message: %#v", d)
				}
				// An internal error is the compiler's fault, not the input's: a
				// policy the schema admits must compile to valid Rego.
				if strings.HasPrefix(d.Message, "internal") {
					t.Fatalf("internal error: %s", d)
				}
			}
			return
		}
		if c == nil {
			t.Fatal("no result and no error")
		}
		if !digestRE.MatchString(c.Digest) {
			t.Fatalf("digest %q", c.Digest)
		}
		again, err := compiler.Compile("", c.Document)
		if err != nil {
			t.Fatalf("the normalized document does not compile:\n%v\n%s", err, c.Document)
		}
		if again.Digest != c.Digest {
			t.Fatalf("recompiled to %s, want %s", again.Digest, c.Digest)
		}
	})
}
