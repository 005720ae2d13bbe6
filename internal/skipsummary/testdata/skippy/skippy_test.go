package skippy

import "testing"

func TestPasses(t *testing.T) { t.Log("a passing test's log, not shown") }

func TestNeedsChromium(t *testing.T) {
	t.Skip("browser tests need Debian's chromium on $PATH")
}

func TestSub(t *testing.T) {
	t.Run("db", func(t *testing.T) { t.Skip("no PostgreSQL here") })
	t.Run("ok", func(t *testing.T) {})
}
