package schema_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAjvStrict compiles the published schemas with ajv in strict mode
// (draft 2020-12), the validator most editors and JavaScript users run: a
// schema that only our Go validator accepts is not the published contract.
// ajv is pinned in testdata/ajv (package.json, package-lock.json); install
// it with `npm ci --prefix schema/testdata/ajv`. Without node or the
// install the test skips, except in CI (CI=true), where it fails.
func TestAjvStrict(t *testing.T) {
	dir := filepath.Join("testdata", "ajv")
	missing := func(why string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s: run `npm ci --prefix schema/testdata/ajv --no-audit --no-fund` first", why)
		}
		t.Skipf("%s (npm ci --prefix schema/testdata/ajv installs ajv)", why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ajv", "package.json")); err != nil {
		missing("ajv is not installed in " + dir)
	}
	cmd := exec.Command(node, "check.mjs", "../../policy.schema.json", "../../conformance.schema.json", "../../serve.schema.json")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ajv strict: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), "ok "); got != 3 {
		t.Fatalf("ajv checked %d schemas, want 3:\n%s", got, out)
	}
}
