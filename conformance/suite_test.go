package conformance

import (
	"context"
	"strings"
	"testing"
)

// TestSuite runs the conformance suite and the examples through the same
// runner as `lineagec test conformance/ examples/`.
func TestSuite(t *testing.T) {
	rep, err := RunPaths(context.Background(), []string{"cases", "../examples"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status == "fail" {
			t.Errorf("FAIL %s\n%s", r.ID, indent(strings.Join(r.Failures, "\n")))
		}
	}
	t.Logf("%d passed, %d failed, %d skipped", rep.Passed, rep.Failed, rep.Skipped)
	if rep.Passed < 80 {
		t.Errorf("only %d cases passed; the suite promises at least 80", rep.Passed)
	}
}
