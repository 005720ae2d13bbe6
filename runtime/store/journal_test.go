package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func openJournaled(t testing.TB, dir string, opts FileOptions) *File {
	t.Helper()
	opts.Sync = SyncJournal
	s := openFile(t, dir, opts)
	if s.SyncMode() != SyncJournal {
		s.Close()
		t.Skipf("no journal on this file system (the store chose %v)", s.SyncMode())
	}
	return s
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// crashedStore makes the files a machine crash can leave: records 0-4 of
// agt_a (over three appends) and 0-2 of agt_b acknowledged and in the journal,
// the logs cut back to what a sync reached before (agt_a after record 1, with
// half of record 2 torn; agt_b after record 0), and a torn entry at the end of
// the journal (an append that was never acknowledged).
func crashedStore(t *testing.T) string {
	dir := t.TempDir()
	s := openJournaled(t, dir, FileOptions{})
	mustCreate(t, s, "agt_a")
	mustCreate(t, s, "agt_b")
	mustAppend(t, s, "agt_a", 0, 2)
	mustAppend(t, s, "agt_b", 0, 1)
	logA := readFile(t, s.Path("agt_a"))
	logB := readFile(t, s.Path("agt_b"))
	mustAppend(t, s, "agt_a", 2, 2)
	mustAppend(t, s, "agt_b", 1, 2)
	mustAppend(t, s, "agt_a", 4, 1)
	journal := readFile(t, filepath.Join(dir, JournalName))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, JournalName)); err != nil || st.Size() != 0 {
		t.Fatalf("Close left the journal at %v bytes (%v), want it empty", st.Size(), err)
	}
	torn := rec("agt_a", 2)
	writeFile(t, s.Path("agt_a"), append(logA, torn[:len(torn)/2]...))
	writeFile(t, s.Path("agt_b"), logB)
	unacked := appendEntry(nil, "agt_a", 5, append(rec("agt_a", 5), '\n'))
	writeFile(t, filepath.Join(dir, JournalName), append(journal, unacked[:len(unacked)-3]...))
	return dir
}

// TestJournalRecoversMachineCrash: opening the store puts back, from the
// journal, every acknowledged record the logs lost, cuts the torn record,
// ignores the torn journal entry, and empties the journal.
func TestJournalRecoversMachineCrash(t *testing.T) {
	dir := crashedStore(t)
	s := openJournaled(t, dir, FileOptions{})
	defer s.Close()
	wantLog(t, s, "agt_a", 5)
	wantLog(t, s, "agt_b", 3)
	if st, err := os.Stat(filepath.Join(dir, JournalName)); err != nil || st.Size() != 0 {
		t.Fatalf("journal after recovery: %v bytes (%v), want empty", st.Size(), err)
	}
	mustAppend(t, s, "agt_a", 5, 1) // the log goes on where the journal left it
	wantLog(t, s, "agt_a", 6)
}

// TestJournalReadOnly: a reader shows what the journal holds without
// writing anything; a store opened without a journal replays it and removes it.
func TestJournalReadOnly(t *testing.T) {
	dir := crashedStore(t)
	before := map[string][]byte{}
	for _, name := range []string{"agt_a.jsonl", "agt_b.jsonl", JournalName} {
		before[name] = readFile(t, filepath.Join(dir, name))
	}
	r := openFile(t, dir, FileOptions{ReadOnly: true})
	wantLog(t, r, "agt_a", 5)
	wantLog(t, r, "agt_b", 3)
	r.Close()
	for name, b := range before {
		if !bytes.Equal(readFile(t, filepath.Join(dir, name)), b) {
			t.Errorf("the read-only store changed %s", name)
		}
	}

	w := openFile(t, dir, FileOptions{Sync: SyncFS})
	wantLog(t, w, "agt_a", 5)
	wantLog(t, w, "agt_b", 3)
	w.Close()
	if _, err := os.Stat(filepath.Join(dir, JournalName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a store without a journal kept it: %v", err)
	}
}

// TestJournalGap: a journal that continues a log past records the log lacks
// is damage, named, not a silent hole.
func TestJournalGap(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, FileOptions{})
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 1)
	s.Close()
	writeFile(t, filepath.Join(dir, JournalName), appendEntry(nil, "agt_a", 3, append(rec("agt_a", 3), '\n')))
	_, err := OpenFile(dir, FileOptions{Sync: SyncJournal})
	var damage *DamageError
	if !errors.As(err, &damage) || damage.Agent != "agt_a" || damage.Seq != 1 {
		t.Fatalf("open: %v, want damage of agt_a at record 1", err)
	}
	if r, err := OpenFile(dir, FileOptions{ReadOnly: true}); err == nil {
		err = r.Scan("agt_a", func(uint64, []byte) error { return nil })
		r.Close()
		if !errors.As(err, &damage) || damage.Seq != 1 {
			t.Fatalf("read-only scan: %v, want damage at record 1", err)
		}
	}
}

// TestJournalCheckpoint: the journal is emptied every CheckpointBytes, and
// nothing is lost across checkpoints and a reopen.
func TestJournalCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, FileOptions{CheckpointBytes: 1024})
	mustCreate(t, s, "agt_a")
	for seq := uint64(0); seq < 60; seq++ {
		mustAppend(t, s, "agt_a", seq, 1)
		if st, _ := os.Stat(filepath.Join(dir, JournalName)); st.Size() > 1024+200 {
			t.Fatalf("journal at %d bytes after record %d, want at most one record past 1 KiB", st.Size(), seq)
		}
	}
	if n := s.commit.checkpoints.Load(); n < 2 {
		t.Errorf("%d checkpoints over 60 records of about 100 bytes, want several", n)
	}
	s.Close()
	s = openJournaled(t, dir, FileOptions{})
	defer s.Close()
	wantLog(t, s, "agt_a", 60)
}

// TestJournalFailure: when the journal write fails, the append fails, its
// log is refused further appends, and no replay brings the records back.
func TestJournalFailure(t *testing.T) {
	dir := t.TempDir()
	fail := false
	s := openJournaled(t, dir, FileOptions{hooks: &fileHooks{journal: func([]byte) error {
		if fail {
			return errors.New("injected journal failure")
		}
		return nil
	}}})
	mustCreate(t, s, "agt_a")
	mustCreate(t, s, "agt_b")
	mustAppend(t, s, "agt_a", 0, 2)
	mustAppend(t, s, "agt_b", 0, 1)
	fail = true
	if err := s.Append("agt_a", 2, rec("agt_a", 2)); err == nil {
		t.Fatal("append with a failing journal succeeded")
	}
	fail = false
	if err := s.Append("agt_a", 2, rec("agt_a", 2)); !errors.Is(err, ErrBroken) {
		t.Fatalf("append after the failure: %v, want ErrBroken", err)
	}
	// The journal as the machine would find it after a crash now: the
	// failed batch's entry must not be in it.
	journal := readFile(t, filepath.Join(dir, JournalName))
	s.Close()
	writeFile(t, filepath.Join(dir, JournalName), journal) // as if the machine crashed here
	s = openJournaled(t, dir, FileOptions{})
	defer s.Close()
	wantLog(t, s, "agt_a", 2)
	wantLog(t, s, "agt_b", 1)
	mustAppend(t, s, "agt_b", 1, 1) // other logs go on
}

// TestReadJournalGarbage: any bytes decode to a prefix of well-formed
// entries, without a panic.
func TestReadJournalGarbage(t *testing.T) {
	good := appendEntry(nil, "agt_a", 0, []byte("{}\n{}\n"))
	good = appendEntry(good, "agt_b", 7, []byte("{\"x\":1}\n"))
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		b := append([]byte(nil), good...)
		switch i % 3 {
		case 0: // flip a byte
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		case 1: // cut
			b = b[:r.IntN(len(b))]
		default: // noise after
			for n := r.IntN(40); n > 0; n-- {
				b = append(b, byte(r.IntN(256)))
			}
		}
		entries, err := readJournal(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if checkAgent(e.agent) != nil || len(e.lines) == 0 {
				t.Fatalf("entry %+v from %x", e, b)
			}
		}
		if i%3 == 2 && len(entries) != 2 {
			t.Fatalf("noise after two good entries lost them: %d entries", len(entries))
		}
	}
}
