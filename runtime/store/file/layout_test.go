package file

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

// where says where agent's log is in dir: "" for the directory itself, the
// shard directory's name, or "missing".
func where(t *testing.T, dir, agent string) string {
	t.Helper()
	h := sha256.Sum256([]byte(agent))
	shard := fmt.Sprintf("%02x", h[0])
	_, flatErr := os.Stat(filepath.Join(dir, agent+Ext))
	_, shardErr := os.Stat(filepath.Join(dir, shard, agent+Ext))
	switch {
	case flatErr == nil && shardErr == nil:
		t.Fatalf("%s has a log in %s and in %s", agent, dir, shard)
	case flatErr == nil:
		return ""
	case shardErr == nil:
		return shard
	}
	return "missing"
}

// checkAll checks that s lists the fleet and that its index agrees with the
// logs.
func checkAll(t *testing.T, s *Store) {
	t.Helper()
	storetest.WantFleet(t, storetest.Default.Lists, s)
	if diff, err := s.CheckIndex(); err != nil || len(diff) > 0 {
		t.Fatalf("CheckIndex = %q, %v", diff, err)
	}
}

// TestFileLayoutFlat: a directory written flat (every log in the directory
// itself, as every lineagec before shard directories wrote it) opens, lists,
// verifies and appends as it is; once it holds ShardAfter logs, new logs go
// to their shard directories, and the mix reads back after a reopen with or
// without the index file.
func TestFileLayoutFlat(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{ShardAfter: math.MaxInt})
	storetest.Fleet(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			t.Fatalf("a flat directory has a subdirectory: %s", e.Name())
		}
	}

	s = openFile(t, dir, Options{ShardAfter: 4})
	checkAll(t, s)
	n := len(scanAll(t, s, "agt_05"))
	if err := s.Append("agt_05", uint64(n), storetest.Rec("agt_05", 99)); err != nil {
		t.Fatal(err)
	}
	if w := where(t, dir, "agt_05"); w != "" {
		t.Fatalf("an old log moved to %q", w)
	}
	mustCreate(t, s, "agt_new")
	mustAppend(t, s, "agt_new", 0, 3)
	if w := where(t, dir, "agt_new"); w == "" || w == "missing" {
		t.Fatalf("a new log in a directory of 12 logs (ShardAfter 4) went to %q", w)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, reopen := range []string{"clean", "no index file", "read-only"} {
		t.Run(reopen, func(t *testing.T) {
			opts := Options{}
			switch reopen {
			case "no index file":
				os.Remove(filepath.Join(dir, IndexName))
			case "read-only":
				opts.ReadOnly = true
			}
			s := openFile(t, dir, opts)
			defer s.Close()
			ids, err := s.Agents()
			if err != nil || len(ids) != 13 {
				t.Fatalf("Agents() = %d ids, %v; want 13", len(ids), err)
			}
			wantLog(t, s, "agt_new", 3)
			if got := len(scanAll(t, s, "agt_05")); got != n+1 {
				t.Fatalf("agt_05 has %d records, want %d", got, n+1)
			}
			rows, _, err := s.ListAgents(store.ListQuery{Limit: 100})
			if err != nil || len(rows) != 13 {
				t.Fatalf("ListAgents = %d rows, %v; want 13", len(rows), err)
			}
			if diff, err := s.CheckIndex(); err != nil || len(diff) > 0 {
				t.Fatalf("CheckIndex = %q, %v", diff, err)
			}
		})
	}
}

// TestFileLayoutShards: a new store puts its first ShardAfter logs in its
// directory and the others in the shard directory of each, named by the
// first byte of the SHA-256 of the id; both kinds read back, through the
// index file and without it.
func TestFileLayoutShards(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{ShardAfter: 3})
	storetest.Fleet(t, s)
	checkAll(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	flat, sharded := 0, 0
	for i := range 12 {
		switch w := where(t, dir, fmt.Sprintf("agt_%02d", i)); w {
		case "":
			flat++
		case "missing":
			t.Fatalf("agt_%02d has no log", i)
		default:
			sharded++
		}
	}
	if flat != 3 || sharded != 9 {
		t.Fatalf("%d logs in the directory, %d in shard directories; want 3 and 9", flat, sharded)
	}
	for _, reopen := range []string{"clean", "no index file", "read-only"} {
		t.Run(reopen, func(t *testing.T) {
			opts := Options{ShardAfter: 3}
			switch reopen {
			case "no index file":
				os.Remove(filepath.Join(dir, IndexName))
			case "read-only":
				opts.ReadOnly = true
			}
			s := openFile(t, dir, opts)
			defer s.Close()
			checkAll(t, s)
			if diff, err := s.CheckIndexOf("agt_11"); err != nil || len(diff) > 0 {
				t.Fatalf("CheckIndexOf = %q, %v", diff, err)
			}
		})
	}
}

// TestFileLayoutStrays: a log in a shard directory that is not its own is no
// log (nothing would find it there), and an agent with a log in the
// directory and one in its shard directory is damage, listed once.
func TestFileLayoutStrays(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{ShardAfter: -1})
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 2)
	mustCreate(t, s, "agt_b")
	mustAppend(t, s, "agt_b", 0, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	a := s.Path("agt_a")
	b, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	wrong := "00"
	if filepath.Base(filepath.Dir(a)) == wrong {
		wrong = "01"
	}
	os.MkdirAll(filepath.Join(dir, wrong), 0o755)
	writeFile(t, filepath.Join(dir, wrong, "agt_stray"+Ext), b)
	writeFile(t, filepath.Join(dir, "agt_a"+Ext), b)

	s = openFile(t, dir, Options{})
	defer s.Close()
	ids, err := s.Agents()
	if err != nil || strings.Join(ids, " ") != "agt_a agt_b" {
		t.Fatalf("Agents() = %q, %v; want agt_a agt_b", ids, err)
	}
	err = s.Scan("agt_a", func(uint64, []byte) error { return nil })
	if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), "second log") {
		t.Fatalf("Scan of an agent with two logs: %v; want the damage", err)
	}
	if err := s.Append("agt_a", 2, rec("agt_a", 2)); !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("Append to an agent with two logs: %v; want the damage", err)
	}
	wantLog(t, s, "agt_b", 2)
}
