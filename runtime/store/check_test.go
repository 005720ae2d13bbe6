package store

import "testing"

// A damaged database row has no byte offset: its message says where without one.
func TestDamageErrorNamesWhere(t *testing.T) {
	for _, c := range []struct {
		err  DamageError
		want string
	}{
		{DamageError{Agent: "a1", Path: "/d/a1.jsonl", Seq: 3, Offset: 812, Reason: "empty line"},
			"store: a1: record 3: empty line (/d/a1.jsonl, byte 812)"},
		{DamageError{Agent: "a1", Path: "postgres", Seq: 4, Offset: -1, Reason: "missing record"},
			"store: a1: record 4: missing record (postgres)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
