package mcpproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateFileReadStrictly: the proxy's state file is read by the one
// strict reader (D373, the proxy's and the hook's state read strictly): a
// call key twice or invalid Unicode is an error naming the file, not a
// silently kept last value.
func TestStateFileReadStrictly(t *testing.T) {
	for _, bad := range []string{`{"k":"req_1","k":"req_2"}`, `{"k":"\ud800"}`, `{"k":1}`} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "agt.calls.json"), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := newOpenCalls(dir, "agt"); err == nil || !strings.Contains(err.Error(), "agt.calls.json") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agt.calls.json"), []byte(`{"k":"req_1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := newOpenCalls(dir, "agt")
	if err != nil || o.m["k"] != "req_1" {
		t.Fatalf("good file: %v", err)
	}
}

// TestExactNameStrict: a tool definition's name is its member "name" exactly;
// a definition with a member name twice (anywhere) or invalid Unicode is no
// definition (D378, tool definitions read strictly).
func TestExactNameStrict(t *testing.T) {
	for raw, want := range map[string]string{
		`{"name":"read","inputSchema":{"type":"object","maximum":18446744073709551615}}`: "read",
		`{"Name":"evil","name":"read"}`: "read",
	} {
		if got, ok := exactName([]byte(raw)); !ok || got != want {
			t.Errorf("%s: %q %v", raw, got, ok)
		}
	}
	for _, raw := range []string{`{"name":"read","name":"delete"}`, `{"name":"read","inputSchema":{"a":1,"a":2}}`,
		`{"name":"re\ud800ad"}`, `{"Name":"read"}`, `{"name":1}`, `[]`, `{"name":"a"} {}`} {
		if got, ok := exactName([]byte(raw)); ok {
			t.Errorf("%s: accepted as %q", raw, got)
		}
	}
}
