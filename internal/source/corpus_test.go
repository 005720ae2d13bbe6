package source

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/internal/diag"
)

var update = flag.Bool("update", false, "rewrite compiler/testdata/invalid/*.want from the actual diagnostics")

const corpus = "../../compiler/testdata"

// corpusFiles lists the policy files (*.yaml, *.yml, *.json) directly in dir.
func corpusFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// check loads and validates a policy file the way the compiler does.
func check(t *testing.T, path string) diag.List {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, diags := Load(filepath.Base(path), data)
	if len(diags) > 0 {
		if doc == nil || doc.Value != nil {
			t.Errorf("Load returned diagnostics and a value")
		}
		return diags
	}
	return Validate(doc, "policy")
}

func TestCorpusValid(t *testing.T) {
	files := corpusFiles(t, filepath.Join(corpus, "valid"))
	if len(files) < 12 {
		t.Errorf("only %d valid policies", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if diags := check(t, f); len(diags) > 0 {
				t.Errorf("want no diagnostics, got:\n%v", diags)
			}
		})
	}
}

func TestCorpusInvalid(t *testing.T) {
	files := corpusFiles(t, filepath.Join(corpus, "invalid"))
	if len(files) < 25 {
		t.Errorf("only %d invalid policies", len(files))
	}
	stems := map[string]string{}
	for _, f := range files {
		stem := strings.TrimSuffix(f, filepath.Ext(f))
		if other, ok := stems[stem]; ok {
			t.Fatalf("%s and %s would share %s.want", other, f, stem)
		}
		stems[stem] = f
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			diags := check(t, f)
			if len(diags) == 0 {
				t.Fatal("no diagnostics")
			}
			var got []string
			for _, d := range diags {
				got = append(got, d.String())
			}
			wantFile := strings.TrimSuffix(f, filepath.Ext(f)) + ".want"
			if *update {
				if err := os.WriteFile(wantFile, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			want := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("diagnostics differ\ngot:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestWantFilesHaveInputs catches a .want left behind by a renamed input.
func TestWantFilesHaveInputs(t *testing.T) {
	wants, _ := filepath.Glob(filepath.Join(corpus, "invalid", "*.want"))
	for _, w := range wants {
		base := strings.TrimSuffix(w, ".want")
		found := false
		for _, ext := range []string{".yaml", ".yml", ".json"} {
			if _, err := os.Stat(base + ext); err == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("%s has no input file", w)
		}
	}
}

func TestTooLarge(t *testing.T) {
	data := make([]byte, 10<<20)
	for i := range data {
		data[i] = ' '
	}
	data[0] = '{'
	start := time.Now()
	doc, diags := Load("big.json", data)
	if len(diags) != 1 || diags[0].Code != diag.CodeTooLarge || doc.Value != nil {
		t.Fatalf("got %v, want one too_large", diags)
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Errorf("took %v", el)
	}
	if got := diags[0].String(); got != "big.json: /: input is 10485760 bytes, over the limit of 4194304 bytes (too_large)" {
		t.Errorf("got %q", got)
	}
}
