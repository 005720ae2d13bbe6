package mcpproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A proxy's copy of the open calls in memory follows what another proxy of
// the same agent writes, also when the file is replaced twice between two
// lookups by one of the same size (a freed inode reused, a modification time
// in the same clock tick): the racy-window rule of decision D161 (the open calls in memory).
func TestOpenCallsFollowOtherProxies(t *testing.T) {
	dir := t.TempDir()
	a, err := newOpenCalls(dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newOpenCalls(dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(o *openCalls, want string) {
		t.Helper()
		if got, err := o.lookup("k"); err != nil || got != want {
			t.Fatalf("lookup = %q, %v; want %q", got, err, want)
		}
	}
	lookup(b, "")
	for i := range 50 {
		id, next := fmt.Sprintf("id-%03d", 2*i), fmt.Sprintf("id-%03d", 2*i+1)
		if err := a.open("k", id); err != nil {
			t.Fatal(err)
		}
		lookup(b, id)
		lookup(b, id) // from memory when it may
		if err := a.drop("k", id); err != nil {
			t.Fatal(err)
		}
		if err := a.open("k", next); err != nil {
			t.Fatal(err)
		}
		lookup(b, next)
		if took, err := a.claim("k", next, true); err != nil || !took {
			t.Fatalf("claim = %v, %v", took, err)
		}
		lookup(b, "")
		lookup(a, "")
	}
}

// A version seen within racyWindow of its modification time is read again
// even when its stat is unchanged: here another version with the same inode,
// size and modification time (written in place, which is what a reused inode
// in the same clock tick looks like to stat).
func TestOpenCallsRacyVersionIsReadAgain(t *testing.T) {
	dir := t.TempDir()
	o, err := newOpenCalls(dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.open("k", "id-1"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.calls.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := o.lookup("k"); got != "id-1" {
		t.Fatalf("lookup = %q", got)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("{\n  \"k\": \"id-2\"\n}\n")
	if cerr := f.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	if err := os.Chtimes(path, time.Time{}, fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if now, err := os.Stat(path); err != nil || !os.SameFile(now, fi) || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the stat changed: %v %v", now, err)
	}
	if got, err := o.lookup("k"); err != nil || got != "id-2" {
		t.Fatalf("lookup of a racy version = %q, %v; want id-2", got, err)
	}
}

// BenchmarkOpenCallsLookup is the state's share of a call: a lookup of a key
// in a file that holds one open call.
func BenchmarkOpenCallsLookup(b *testing.B) {
	o, err := newOpenCalls(b.TempDir(), "agent")
	if err != nil {
		b.Fatal(err)
	}
	if err := o.open("other", "id"); err != nil {
		b.Fatal(err)
	}
	// A version older than racyWindow: read once more, then from memory.
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(o.path, old, old); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := o.lookup("k"); err != nil {
			b.Fatal(err)
		}
	}
}

// A copy trusted from memory (its file seen long after it was written) is
// still dropped when another proxy replaces the file: the stat of the new
// file (inode, size, modification time) differs from the kept one's, even
// when the new file is back-dated as well (D161: the open calls in memory).
func TestOpenCallsTrustedCopyFollowsAReplacement(t *testing.T) {
	dir := t.TempDir()
	a, err := newOpenCalls(dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newOpenCalls(dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.calls.json")
	backdate := func(ago time.Duration) {
		t.Helper()
		old := time.Now().Add(-ago)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		id := fmt.Sprintf("id-%03d", i)
		if err := a.open("k", id); err != nil {
			t.Fatal(err)
		}
		backdate(time.Duration(20-i) * time.Minute) // each version older than racyWindow, all different
		for range 2 {                               // the second lookup is answered from memory
			if got, err := b.lookup("k"); err != nil || got != id {
				t.Fatalf("version %d: lookup = %q, %v; want %q", i, got, err, id)
			}
		}
		if err := a.drop("k", id); err != nil {
			t.Fatal(err)
		}
	}
}
