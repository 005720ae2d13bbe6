package backup

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// TestRestoreShards: a restore lays the logs out as a file store places new
// logs (D390 (new logs go to hash-named shard directories once the
// directory holds 4,096 logs)): the first ShardAfter in the directory, the
// others in their shard directories; the store opens the result and lists
// every agent.
func TestRestoreShards(t *testing.T) {
	const n, after = 12, 5
	defer func(was int) { shardAfter = was }(shardAfter)
	shardAfter = after
	compile := func(doc []byte) (*policy.Compiled, error) { return compiler.Compile("", doc) }
	st := memory.New()
	i := 0
	rt := runtime.Open(st, runtime.Options{Compile: compile, NewAgentID: func() string { i++; return fmt.Sprintf("agt_%05d", i) }})
	c, err := compiler.Compile("p.yaml", []byte("budget: 10\ntools:\n  read: {cost: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for range n {
		if _, err := rt.CreateAgent(context.Background(), c, runtime.CreateOptions{Name: "a", At: at}); err != nil {
			t.Fatal(err)
		}
	}
	var tar bytes.Buffer
	if _, err := Write(context.Background(), &tar, Source{Store: st}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	m, err := Restore(&tar, dir, compile)
	if err != nil || len(m.Agents) != n {
		t.Fatalf("Restore: %d agents, %v; want %d", len(m.Agents), err, n)
	}
	flat, _ := filepath.Glob(filepath.Join(dir, "*"+file.Ext))
	sharded, _ := filepath.Glob(filepath.Join(dir, "[0-9a-f][0-9a-f]", "*"+file.Ext))
	if len(flat) != after || len(sharded) != n-after {
		t.Fatalf("%d logs in the directory, %d in shard directories; want %d and %d", len(flat), len(sharded), after, n-after)
	}
	fs, err := file.Open(dir, file.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	ids, err := fs.Agents()
	if err != nil || len(ids) != n {
		t.Fatalf("Agents() = %d ids, %v; want %d", len(ids), err, n)
	}
	for _, id := range ids {
		if err := fs.Scan(id, func(uint64, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}
