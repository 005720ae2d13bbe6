package file

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
)

// rollbackStore makes agt_a with 6 acknowledged records (the first 2 as a
// log's first records, the other 4 through the journal), then damages its
// log under the open store (cut, before Close, by the caller's damage).
func rollbackStore(t *testing.T, opts Options, damage func(path string, log []byte)) (dir string, closeErr error) {
	t.Helper()
	dir = t.TempDir()
	s := openJournaled(t, dir, opts)
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 2)
	for seq := uint64(2); seq < 6; seq++ {
		mustAppend(t, s, "agt_a", seq, 1)
	}
	damage(s.Path("agt_a"), readFile(t, s.Path("agt_a")))
	return dir, s.Close()
}

// cutTo keeps the log's first n lines.
func cutTo(n int) func(string, []byte) {
	return func(path string, log []byte) {
		lines := bytes.SplitAfter(log, []byte{'\n'})
		if err := os.Truncate(path, int64(len(bytes.Join(lines[:n], nil)))); err != nil {
			panic(err)
		}
	}
}

// editRecord changes one byte of record seq in place (same length, as a
// rewrite that re-hashes the chain would).
func editRecord(seq int) func(string, []byte) {
	return func(path string, log []byte) {
		lines := bytes.SplitAfter(log, []byte{'\n'})
		off := len(bytes.Join(lines[:seq], nil)) + bytes.Index(lines[seq], []byte(`"seq":`)) + 6
		b := bytes.Clone(log)
		b[off] = '9'
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b[off:off+1], int64(off)); err != nil {
			panic(err)
		}
	}
}

// TestCloseKeepsJournalOfCutLog: a log cut back under the running store
// (D250 (a journal outlives a log that lost its records)): Close keeps the
// journal and reports the damage, naming the agent and the first record the
// log lost; the next open puts the records back.
func TestCloseKeepsJournalOfCutLog(t *testing.T) {
	dir, err := rollbackStore(t, Options{}, cutTo(3))
	var damage *store.DamageError
	if !errors.As(err, &damage) || damage.Agent != "agt_a" || damage.Seq != 2 {
		t.Fatalf("Close = %v, want the damage of agt_a from record 2 (the journal's first)", err)
	}
	if st, err := os.Stat(filepath.Join(dir, JournalName)); err != nil || st.Size() == 0 {
		t.Fatalf("Close emptied the journal (%v), which held the records the log lost", err)
	}
	s := openJournaled(t, dir, Options{})
	defer s.Close()
	wantLog(t, s, "agt_a", 6)
	mustAppend(t, s, "agt_a", 6, 1)
}

// TestCloseKeepsJournalOfEditedLog: the same for a record edited in place.
func TestCloseKeepsJournalOfEditedLog(t *testing.T) {
	dir, err := rollbackStore(t, Options{}, editRecord(4))
	var damage *store.DamageError
	if !errors.As(err, &damage) || damage.Agent != "agt_a" {
		t.Fatalf("Close = %v, want the damage of agt_a", err)
	}
	s := openJournaled(t, dir, Options{})
	defer s.Close()
	wantLog(t, s, "agt_a", 6)
}

// TestCheckpointKeepsJournalOfCutLog: a checkpoint of the running store (the
// journal grown past CheckpointBytes) does not empty the journal either once
// a log lacks its records; every later record stays in it too.
func TestCheckpointKeepsJournalOfCutLog(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{CheckpointBytes: 300})
	mustCreate(t, s, "agt_a")
	mustCreate(t, s, "agt_b")
	mustAppend(t, s, "agt_a", 0, 2)
	mustAppend(t, s, "agt_b", 0, 2)
	mustAppend(t, s, "agt_a", 2, 1)
	cutTo(2)(s.Path("agt_a"), readFile(t, s.Path("agt_a")))
	for seq := uint64(2); seq < 12; seq++ {
		mustAppend(t, s, "agt_b", seq, 1)
	}
	if n := s.commit.checkpoints.Load(); n != 0 {
		t.Fatalf("%d checkpoints emptied the journal after agt_a's log lost record 2", n)
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "agt_a") {
		t.Fatalf("Close = %v, want agt_a's damage", err)
	}
	s = openJournaled(t, dir, Options{})
	defer s.Close()
	wantLog(t, s, "agt_a", 3)
	wantLog(t, s, "agt_b", 12)
}

// TestCloseCleanEmptiesJournal: without damage Close still empties it.
func TestCloseCleanEmptiesJournal(t *testing.T) {
	dir, err := rollbackStore(t, Options{}, func(string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, JournalName)); err != nil || st.Size() != 0 {
		t.Fatalf("journal after a clean Close: %v bytes (%v), want 0", st.Size(), err)
	}
}

// TestCloseNotesLostRecords: a log cut back under the store where no journal
// holds the records it lost (here: no journal at all) is noted at Close; the
// next open reports it as damage from the first lost record, Scan passing the
// records before it and Append refused, after any number of reopens, until
// the log is put back (D255 (a cut no copy holds is noted at Close)).
func TestCloseNotesLostRecords(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{Sync: SyncFiles})
	mustCreate(t, s, "agt_a")
	mustCreate(t, s, "agt_b")
	mustAppend(t, s, "agt_a", 0, 2)
	mustAppend(t, s, "agt_b", 0, 2)
	for seq := uint64(2); seq < 6; seq++ {
		mustAppend(t, s, "agt_a", seq, 1)
	}
	whole := readFile(t, s.Path("agt_a"))
	cutTo(3)(s.Path("agt_a"), whole)
	err := s.Close()
	var damage *store.DamageError
	if !errors.As(err, &damage) || damage.Agent != "agt_a" || damage.Seq != 3 {
		t.Fatalf("Close = %v, want agt_a's damage from record 3", err)
	}
	for range 2 {
		s = openFile(t, dir, Options{Sync: SyncFiles})
		var got int
		err = s.Scan("agt_a", func(uint64, []byte) error { got++; return nil })
		if !errors.As(err, &damage) || damage.Seq != 3 || got != 3 || !strings.Contains(err.Error(), "records 3 to 5 are lost") {
			t.Fatalf("Scan after reopen: %d records, %v; want 3 and the damage from record 3", got, err)
		}
		if err := s.Append("agt_a", 3, rec("agt_a", 3)); !errors.Is(err, store.ErrDamaged) {
			t.Errorf("Append to the cut log: %v, want the damage", err)
		}
		wantLog(t, s, "agt_b", 2)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "agt_a"+Ext), whole) // put back from a backup
	s = openFile(t, dir, Options{Sync: SyncFiles})
	defer s.Close()
	wantLog(t, s, "agt_a", 6)
	if _, err := os.Stat(filepath.Join(dir, LostDir, "agt_a.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the note stays after the log was put back: %v", err)
	}
}

// BenchmarkCheckpointReadBack: what reading back the logs costs a journal
// checkpoint (D251 (what a checkpoint reads back)), for 64 agents' 1 KiB
// records filling a journal of about 16 MiB.
func BenchmarkCheckpointReadBack(b *testing.B) {
	s := openJournaled(b, b.TempDir(), Options{CheckpointBytes: 1 << 40})
	defer s.Close()
	recs := make([][]byte, 16)
	for i := range recs {
		recs[i] = bytes.Repeat([]byte{'x'}, 1024)
	}
	for a := range 64 {
		agent := fmt.Sprintf("agt_%d", a)
		mustCreate(b, s, agent)
		if err := s.Append(agent, 0, recs[0]); err != nil {
			b.Fatal(err)
		}
		for seq := uint64(1); seq < 256; seq += 16 {
			if err := s.Append(agent, seq, recs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	var size int64
	for _, runs := range s.commit.logged {
		for _, r := range runs {
			size += r.end - r.off
		}
	}
	b.SetBytes(size)
	for b.Loop() {
		if err := s.commit.checkLogged(); err != nil {
			b.Fatal(err)
		}
	}
}
