package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestSummary runs a real `go test -json` of a package whose tests pass and
// skip through the filter: the plain result line comes through, a passing
// test's log does not, and every skip is listed at the end with its reason.
func TestSummary(t *testing.T) {
	cmd := exec.Command("go", "test", "-count=1", "-json", "./testdata/skippy")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("go test -json: %v\n%s", err, raw)
	}
	var out bytes.Buffer
	if err := filter(bytes.NewReader(raw), &out, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"ok  \tgithub.com/lineage-guard/lineage/internal/skipsummary/testdata/skippy",
		"2 tests skipped",
		"skippy TestNeedsChromium: skippy_test.go:8: browser tests need Debian's chromium on $PATH\n",
		"skippy TestSub/db: skippy_test.go:12: no PostgreSQL here\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "not shown") || strings.Contains(got, "=== RUN") || strings.HasPrefix(got, "PASS") {
		t.Errorf("a passing test's output came through:\n%s", got)
	}
}

// A failing test's output comes through whole, as go test prints it.
func TestFailShown(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestX"}
{"Action":"output","Package":"p","Test":"TestX","Output":"=== RUN   TestX\n"}
{"Action":"output","Package":"p","Test":"TestX","Output":"    x_test.go:3: boom\n"}
{"Action":"output","Package":"p","Test":"TestX","Output":"--- FAIL: TestX (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestX"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
not json at all
`
	var out bytes.Buffer
	if err := filter(strings.NewReader(in), &out, &out); err != nil {
		t.Fatal(err)
	}
	want := "    x_test.go:3: boom\n--- FAIL: TestX (0.00s)\nFAIL\tp\t0.01s\nnot json at all\n"
	if out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
}
