package postgres

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

const policyYAML = `
budget: 10
tools:
  pay: {cost: 4, requires_approval: true}
  note:
    cost: 1
    when: [{expr: "args.ok == true", reason: not_ok, scar: minor}]
`

// guard runs the same requests on a runtime over st, with a fixed clock and
// agent id, and returns the agent's id.
func guard(t *testing.T, st store.Store) string {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rt := runtime.Open(st, runtime.Options{
		Clock:      func() time.Time { return t0 },
		NewAgentID: func() string { return "agt_same" },
	})
	c, err := compiler.Compile("p.yaml", []byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{Name: "pg", At: t0})
	if err != nil {
		t.Fatal(err)
	}
	steps := []lineage.Request{
		{ID: "r1", Tool: "note", Args: map[string]any{"ok": true}, At: at(1)},
		{ID: "r2", Tool: "note", Args: map[string]any{"ok": false}, At: at(2)},
		{ID: "r3", Tool: "pay", Args: map[string]any{"amount": 100, "to": "é\u2028"}, At: at(3)},
		{ID: "r1", Tool: "note", Args: map[string]any{"ok": true}, At: at(4)}, // a retry
	}
	want := []lineage.Decision{lineage.Allow, lineage.Deny, lineage.Pending, lineage.Allow}
	for i, req := range steps {
		v, err := rt.Request(ctx, id, req)
		if err != nil || v.Decision != want[i] {
			t.Fatalf("request %d: %+v, %v; want %s", i, v, err, want[i])
		}
	}
	if v, err := rt.Approve(ctx, id, runtime.Approval{RequestID: "r3", By: "alice", At: at(5)}); err != nil || v.Decision != lineage.Allow {
		t.Fatalf("approve: %+v, %v", v, err)
	}
	if _, err := rt.Terminate(ctx, id, runtime.Kill{By: "bob", Note: "done", At: at(6)}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Verify(id); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// A runtime opened anew replays the log from the store.
	if err := runtime.Open(st, runtime.Options{}).Verify(id); err != nil {
		t.Fatalf("Verify after reopening: %v", err)
	}
	return id
}

// TestRuntimeSameBytes runs a runtime over the PostgreSQL store and over the
// file store with the same requests: an export of the PostgreSQL log (each
// record and a newline) is byte for byte the file store's file, and verifies
// offline as a file.
func TestRuntimeSameBytes(t *testing.T) {
	pg := open(t, pgtest.URL(t))
	id := guard(t, pg)
	dir := t.TempDir()
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if guard(t, fs) != id {
		t.Fatal("the two runtimes made different agents")
	}
	var export bytes.Buffer
	if err := pg.Scan(id, func(_ uint64, rec []byte) error {
		export.Write(rec)
		return export.WriteByte('\n')
	}); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(dir, id+file.Ext))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(export.Bytes(), file) {
		t.Fatalf("export from postgres differs from the file store's log:\npostgres:\n%s\nfile:\n%s", export.Bytes(), file)
	}
	recs, err := runtime.VerifyLines(func(fn func(uint64, []byte) error) error {
		sc := bufio.NewScanner(bytes.NewReader(export.Bytes()))
		for seq := uint64(0); sc.Scan(); seq++ {
			if err := fn(seq, sc.Bytes()); err != nil {
				return err
			}
		}
		return sc.Err()
	})
	if err != nil || len(recs) != 7 {
		t.Fatalf("offline verify of the export: %d records, %v; want 7 (genesis, policy, 3 requests, an approval, the termination)", len(recs), err)
	}
}
