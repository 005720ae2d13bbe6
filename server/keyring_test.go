package server_test

import (
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/server"
)

// TestKeysFrom: a key ring is one hex key a line, first first; blank lines
// and # comments are skipped; a bad line is named. D331 (comments in the
// key ring).
func TestKeysFrom(t *testing.T) {
	a, b := strings.TrimSpace(string(server.NewKey())), strings.TrimSpace(string(server.NewKey()))
	keys, err := server.KeysFrom([]byte("# new, 2026-12-02\n" + b + "\n\n  " + a + "  \n"))
	if err != nil || len(keys) != 2 {
		t.Fatalf("KeysFrom: %d keys, %v; want 2", len(keys), err)
	}
	for _, c := range []struct{ text, want string }{
		{"", "holds no key"},
		{"# only a comment\n", "holds no key"},
		{a + "\nzz\n", "line 2: "},
		{"00ff\n", "line 1: "},
	} {
		if _, err := server.KeysFrom([]byte(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("KeysFrom(%q): %v; want %q", c.text, err, c.want)
		}
	}
}
