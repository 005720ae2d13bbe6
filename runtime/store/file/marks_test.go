package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
)

const (
	headA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	headB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestFileMarks: a checkpoint mark is kept in the data directory across a
// reopen, only rises, and one that cannot be read is damage, not "no mark"
// (D253 (the signed size kept in the data directory)).
func TestFileMarks(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	if m, err := s.LoadMark("agt_a"); err != nil || m != (store.Mark{}) {
		t.Fatalf("LoadMark of an agent never signed: %+v %v", m, err)
	}
	if err := s.StoreMark("agt_a", store.Mark{Size: 6, Head: headA}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreMark("agt_a", store.Mark{Size: 3, Head: headB}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreMark("agt.tmp", store.Mark{Size: 2, Head: headB}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreMark("../x", store.Mark{Size: 2, Head: headB}); !errors.Is(err, store.ErrBadAgent) {
		t.Errorf("StoreMark of a bad id: %v", err)
	}
	s.Close()
	s = openFile(t, dir, Options{})
	defer s.Close()
	if m, err := s.LoadMark("agt_a"); err != nil || m != (store.Mark{Size: 6, Head: headA}) {
		t.Fatalf("LoadMark after reopen: %+v %v, want 6 %s (a mark never goes down)", m, err, headA)
	}
	if ids, err := s.Agents(); err != nil || len(ids) != 0 {
		t.Errorf("Agents lists the marks: %q %v", ids, err)
	}
	if err := os.WriteFile(filepath.Join(dir, MarksDir, "agt_a.json"), []byte("{\"size\":6"), 0o644); err != nil {
		t.Fatal(err)
	}
	var damage *store.DamageError
	if _, err := s.LoadMark("agt_a"); !errors.As(err, &damage) || !strings.Contains(err.Error(), "agt_a") {
		t.Errorf("LoadMark of a torn mark: %v, want damage", err)
	}
}

// BenchmarkFileStoreMark: what keeping a mark costs the signer (two syncs
// and a rename), per checkpoint signed.
func BenchmarkFileStoreMark(b *testing.B) {
	s := openFile(b, b.TempDir(), Options{})
	defer s.Close()
	var n uint64
	for b.Loop() {
		n++
		if err := s.StoreMark("agt_a", store.Mark{Size: n, Head: headA}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileStoreMarkParallel: marks of different agents, kept at once.
func BenchmarkFileStoreMarkParallel(b *testing.B) {
	s := openFile(b, b.TempDir(), Options{})
	defer s.Close()
	var next atomic.Int64
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		agent := fmt.Sprintf("agt_%d", next.Add(1))
		var n uint64
		for pb.Next() {
			n++
			if err := s.StoreMark(agent, store.Mark{Size: n, Head: headA}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
