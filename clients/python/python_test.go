// Package python_test runs the Python client's tests (clients/python/tests)
// with `python3 -m unittest` against a real guard service, so that
// `go test ./...` (./test.sh, CI) runs them.
package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/server/servertest"
)

// python3 finds the interpreter; without one the test skips, except under
// CI=true, where it fails (.ci/run installs Debian's python3).
func python3(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 is not installed (under CI it must be: .ci/run installs it): %v", err)
		}
		t.Skipf("skipping the Python client's tests: python3 is not installed (%v); CI installs it", err)
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info >= (3, 10))").Output()
	if err != nil || strings.TrimSpace(string(out)) != "True" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not Python 3.10 or later (%v)", py, err)
		}
		t.Skipf("skipping the Python client's tests: %s is not Python 3.10 or later", py)
	}
	return py
}

// TestPythonClient runs every test of clients/python/tests against a guard
// service on a loopback port (the server package serving over HTTP, as
// `lineagec serve` does: decision "Python tests against the in-process
// service"), with an admin and an approver token in the environment.
func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Python client's tests run in the full run (they test no Go code for -race)")
	}
	py := python3(t)
	svc := servertest.Start(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "tests")
	cmd.Dir = "."
	cmd.Env = append(os.Environ(),
		"LINEAGE_TEST_SERVER="+svc.URL,
		"LINEAGE_TEST_ADMIN_TOKEN="+svc.AdminToken,
		"LINEAGE_TEST_APPROVER_TOKEN="+svc.ApproverToken,
		"PYTHONDONTWRITEBYTECODE=1",
		"LINEAGE_SERVER=", "LINEAGE_TOKEN=",
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("a Python test skipped although the service is up:\n%s", out)
	}
}

// TestPythonTypes checks the package's type hints, and examples/python's,
// with mypy --strict (Debian's python3-mypy: .ci/run installs it; the
// interpreter that has it runs it). mypy's cache is kept in the user's cache
// directory: a cold run reads all of typeshed (a minute on a busy machine).
func TestPythonTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the type check runs in the full run")
	}
	var py string
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(cand, "-m", "mypy", "--version").Run() == nil {
			py = cand
			break
		}
	}
	if py == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no python3 with mypy (under CI it must be there: .ci/run installs python3-mypy)")
		}
		t.Skip("skipping the type check: no python3 here has mypy (apt-get install python3-mypy)")
	}
	cache := t.TempDir()
	if dir, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(dir, "lineage", "mypy")
	}
	cmd := exec.Command(py, "-m", "mypy", "--cache-dir", cache, "--strict", "lineage_guard", "../../examples/python/agent.py")
	cmd.Env = append(os.Environ(), "MYPYPATH=.")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("mypy --strict: %v\n%s", err, out)
	}
}
