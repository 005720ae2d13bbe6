package file

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
)

func openJournaled(t testing.TB, dir string, opts Options) *Store {
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

// zeroTail returns where the journal image b's zero tail starts: the end of
// the bytes its entries were written to (D421: the journal is written in
// place).
func zeroTail(b []byte) int { return len(bytes.TrimRight(b, "\x00")) }

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
// the journal (an append that was never acknowledged), written in place into
// its zero tail.
func crashedStore(t *testing.T) string {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{})
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
	used := zeroTail(journal)
	if len(journal)-used < len(unacked) {
		t.Fatalf("the live journal is %d bytes, its entries %d: want a zero tail past them that takes the next entry", len(journal), used)
	}
	copy(journal[used:], unacked[:len(unacked)-3])
	writeFile(t, filepath.Join(dir, JournalName), journal)
	return dir
}

// TestJournalRecoversMachineCrash: opening the store puts back, from the
// journal, every acknowledged record the logs lost, cuts the torn record,
// ignores the torn journal entry, and empties the journal.
func TestJournalRecoversMachineCrash(t *testing.T) {
	dir := crashedStore(t)
	s := openJournaled(t, dir, Options{})
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
	r := openFile(t, dir, Options{ReadOnly: true})
	wantLog(t, r, "agt_a", 5)
	wantLog(t, r, "agt_b", 3)
	r.Close()
	for name, b := range before {
		if !bytes.Equal(readFile(t, filepath.Join(dir, name)), b) {
			t.Errorf("the read-only store changed %s", name)
		}
	}

	w := openFile(t, dir, Options{Sync: SyncFS})
	wantLog(t, w, "agt_a", 5)
	wantLog(t, w, "agt_b", 3)
	w.Close()
	if _, err := os.Stat(filepath.Join(dir, JournalName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a store without a journal kept it: %v", err)
	}
}

// TestJournalGap: a journal that continues a log past records the log lacks
// is damage of that log, named; the store opens, the other logs work, and
// the journal keeps the damaged log's records (across checkpoints and
// reopening) for whoever repairs it.
func TestJournalGap(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{})
	mustCreate(t, s, "agt_a")
	mustCreate(t, s, "agt_b")
	mustAppend(t, s, "agt_a", 0, 1)
	s.Close()
	gap := appendEntry(nil, "agt_a", 3, append(rec("agt_a", 3), '\n'))
	writeFile(t, filepath.Join(dir, JournalName), gap)
	for round := 0; round < 2; round++ {
		s = openJournaled(t, dir, Options{CheckpointBytes: 200})
		var damage *store.DamageError
		if err := s.Scan("agt_a", func(uint64, []byte) error { return nil }); !errors.As(err, &damage) || damage.Agent != "agt_a" || damage.Seq != 1 {
			t.Fatalf("round %d: scan of agt_a: %v, want damage at record 1", round, err)
		}
		if err := s.Append("agt_a", 1, rec("agt_a", 1)); !errors.As(err, &damage) {
			t.Fatalf("round %d: append to agt_a: %v, want the damage", round, err)
		}
		for seq := uint64(round * 5); seq < uint64(round*5+5); seq++ { // enough to checkpoint
			mustAppend(t, s, "agt_b", seq, 1)
		}
		if s.commit.checkpoints.Load() == 0 {
			t.Fatalf("round %d: no checkpoint", round)
		}
		s.Close()
		if j := readFile(t, filepath.Join(dir, JournalName)); !bytes.Equal(j, gap) {
			t.Fatalf("round %d: the journal is %q, want the damaged log's entry kept", round, j)
		}
	}
	r := openFile(t, dir, Options{ReadOnly: true})
	defer r.Close()
	var damage *store.DamageError
	if err := r.Scan("agt_a", func(uint64, []byte) error { return nil }); !errors.As(err, &damage) || damage.Seq != 1 {
		t.Fatalf("read-only scan: %v, want damage at record 1", err)
	}
	wantLog(t, r, "agt_b", 10)
}

// TestJournalHoleInLog: a machine crash may lose a log's unsynced pages in
// any order, leaving zeros where a record was and a later record whole. The
// log is rewritten from the journal's first record on, not trusted by count.
func TestJournalHoleInLog(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{})
	mustCreate(t, s, "agt_a")
	s.Close() // a checkpoint: nothing in the journal
	s = openJournaled(t, dir, Options{})
	mustAppend(t, s, "agt_a", 0, 2)
	s.Close() // records 0-1 durable
	synced := readFile(t, s.Path("agt_a"))
	s = openJournaled(t, dir, Options{})
	for seq := uint64(2); seq < 5; seq++ {
		mustAppend(t, s, "agt_a", seq, 1)
	}
	journal := readFile(t, filepath.Join(dir, JournalName))
	s.Close()
	r2, r3, r4 := rec("agt_a", 2), rec("agt_a", 3), rec("agt_a", 4)
	crashed := append([]byte(nil), synced...)
	crashed = append(crashed, make([]byte, len(r2)+1+len(r3)/2)...) // zeros
	crashed = append(append(crashed, r3[len(r3)/2:]...), '\n')
	crashed = append(append(crashed, r4...), '\n')
	writeFile(t, s.Path("agt_a"), crashed)
	writeFile(t, filepath.Join(dir, JournalName), journal)

	// Other shapes of a lost tail: zeros longer than a record may be (the
	// scan calls that damage), and a stale newline where record 2 starts.
	long := append(append([]byte(nil), synced...), make([]byte, store.MaxRecord+10)...)
	stale := append(append([]byte(nil), synced...), "\n{\"stale\":1}\n"...)
	for name, log := range map[string][]byte{"hole": crashed, "long zeros": long, "stale newline": stale} {
		writeFile(t, s.Path("agt_a"), log)
		writeFile(t, filepath.Join(dir, JournalName), journal)
		r := openFile(t, dir, Options{ReadOnly: true}) // the reader's view, without writing
		wantLog(t, r, "agt_a", 5)
		r.Close()
		for i := 0; i < 2; i++ { // the second time as if the first replay had been cut short
			s = openJournaled(t, dir, Options{})
			if got := scanAll(t, s, "agt_a"); len(got) != 5 {
				t.Fatalf("%s: %d records after replay %d, want 5", name, len(got), i)
			}
			wantLog(t, s, "agt_a", 5)
			s.Close()
			writeFile(t, filepath.Join(dir, JournalName), journal)
		}
	}
}

// TestJournalRefusesHugeAppend: an append larger than a journal entry takes
// is refused before anything is written; the log goes on.
func TestJournalRefusesHugeAppend(t *testing.T) {
	defer func(old int) { maxEntry = old }(maxEntry)
	maxEntry = 300
	s := openJournaled(t, t.TempDir(), Options{})
	defer s.Close()
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 1)
	if err := s.Append("agt_a", 1, rec("agt_a", 1), rec("agt_a", 2), rec("agt_a", 3), rec("agt_a", 4)); !errors.Is(err, store.ErrBadRecord) {
		t.Fatalf("a 4-record append over the entry limit: %v, want ErrBadRecord", err)
	}
	mustAppend(t, s, "agt_a", 1, 1)
	wantLog(t, s, "agt_a", 2)
}

// TestJournalMissingOrDamagedLog: a journaled log that is gone, or damaged
// before the journal's records, is that log's damage; the store opens in
// every writable mode, and a log the journal holds whole is rebuilt.
func TestJournalMissingOrDamagedLog(t *testing.T) {
	for _, mode := range []SyncMode{SyncJournal, SyncFiles} {
		dir := t.TempDir()
		s := openJournaled(t, dir, Options{})
		for _, id := range []string{"agt_a", "agt_b", "agt_c"} {
			mustCreate(t, s, id)
		}
		s.Close()
		s = openJournaled(t, dir, Options{})
		mustAppend(t, s, "agt_a", 0, 2)
		mustAppend(t, s, "agt_b", 0, 2)
		mustAppend(t, s, "agt_c", 0, 1)
		s.Close()
		s = openJournaled(t, dir, Options{})
		mustAppend(t, s, "agt_a", 2, 1)
		mustAppend(t, s, "agt_b", 2, 1)
		mustAppend(t, s, "agt_c", 1, 1)
		journal := readFile(t, filepath.Join(dir, JournalName))
		s.Close()
		writeFile(t, filepath.Join(dir, JournalName), journal)
		os.Remove(s.Path("agt_b"))                                                           // gone
		writeFile(t, s.Path("agt_c"), append([]byte("\n"), readFile(t, s.Path("agt_c"))...)) // damaged before record 1

		w, err := Open(dir, Options{Sync: mode})
		if err != nil {
			t.Fatalf("%v: open: %v", mode, err)
		}
		wantLog(t, w, "agt_a", 3)
		var damage *store.DamageError
		for _, id := range []string{"agt_b", "agt_c"} {
			if err := w.Scan(id, func(uint64, []byte) error { return nil }); !errors.As(err, &damage) || damage.Agent != id {
				t.Errorf("%v: scan of %s: %v, want its damage", mode, id, err)
			}
		}
		if err := w.Create("agt_b"); !errors.As(err, &damage) {
			t.Errorf("%v: create of agt_b over its journaled records: %v, want the damage", mode, err)
		}
		w.Close()
		if st, err := os.Stat(filepath.Join(dir, JournalName)); err != nil || st.Size() == 0 {
			t.Errorf("%v: the journal lost the damaged logs' records: %v", mode, err)
		}
	}
}

// TestJournalReplayOpensOneLogAtATime: replaying a journal that spans many
// logs does not hold a descriptor per log.
func TestJournalReplayOpensOneLogAtATime(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{MaxOpenFiles: 32})
	const n = 300
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("agt_%03d", i)
		mustCreate(t, s, id)
		mustAppend(t, s, id, 0, 1)
		mustAppend(t, s, id, 1, 1) // journaled (the first records are not: D41 (crash-safe create))
	}
	journal := readFile(t, filepath.Join(dir, JournalName))
	s.Close()
	writeFile(t, filepath.Join(dir, JournalName), journal)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	lim := old
	lim.Cur = 200
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	s = openJournaled(t, dir, Options{MaxOpenFiles: 32})
	defer s.Close()
	wantLog(t, s, "agt_299", 2)
}

// TestJournalSyncFailureNotRevived: an append whose log fails to sync (the
// test hook) stays out of the journal, so no replay brings it back.
func TestJournalSyncFailureNotRevived(t *testing.T) {
	dir := t.TempDir()
	fail := false
	s := openJournaled(t, dir, Options{hooks: &fileHooks{sync: func(string) error {
		if fail {
			return errors.New("injected sync failure")
		}
		return nil
	}}})
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 2)
	fail = true
	if err := s.Append("agt_a", 2, rec("agt_a", 2)); err == nil {
		t.Fatal("append with a failing sync succeeded")
	}
	journal := readFile(t, filepath.Join(dir, JournalName))
	s.Close()
	writeFile(t, filepath.Join(dir, JournalName), journal)
	s = openJournaled(t, dir, Options{})
	defer s.Close()
	wantLog(t, s, "agt_a", 2)
}

// TestJournalCheckpoint: the journal is emptied every CheckpointBytes, and
// nothing is lost across checkpoints and a reopen.
func TestJournalCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{CheckpointBytes: 1024})
	mustCreate(t, s, "agt_a")
	for seq := uint64(0); seq < 60; seq++ {
		mustAppend(t, s, "agt_a", seq, 1)
		if n := zeroTail(readFile(t, filepath.Join(dir, JournalName))); n > 1024+200 {
			t.Fatalf("journal entries of %d bytes after record %d, want at most one record past 1 KiB", n, seq)
		}
	}
	if n := s.commit.checkpoints.Load(); n < 2 {
		t.Errorf("%d checkpoints over 60 records of about 100 bytes, want several", n)
	}
	s.Close()
	s = openJournaled(t, dir, Options{})
	defer s.Close()
	wantLog(t, s, "agt_a", 60)
}

// TestJournalWrittenInPlace: a batch writes into the zero tail the journal's
// file already has, so the file's size does not change from one batch to the
// next while there is room (D421: the journal is written in place); the
// tail is at most JournalSlack; reading the live journal gives its entries
// and stops at the tail; Close leaves no tail.
func TestJournalWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	s := openJournaled(t, dir, Options{})
	mustCreate(t, s, "agt_a")
	size := func() int64 {
		st, err := os.Stat(filepath.Join(dir, JournalName))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	mustAppend(t, s, "agt_a", 0, 1) // a log's first records are synced with it, not journaled (D41: crash-safe create)
	mustAppend(t, s, "agt_a", 1, 1)
	first := size()
	if used := zeroTail(readFile(t, filepath.Join(dir, JournalName))); first <= int64(used) || first-int64(used) > JournalSlack {
		t.Fatalf("journal of %d bytes with %d of entries: want a zero tail of at most %d", first, used, JournalSlack)
	}
	for seq := uint64(2); seq < 40; seq++ {
		mustAppend(t, s, "agt_a", seq, 1)
		if got := size(); got != first {
			t.Fatalf("the journal went from %d to %d bytes at record %d, with room left", first, got, seq)
		}
	}
	j := readFile(t, filepath.Join(dir, JournalName))
	entries, damaged, used, err := readJournal(bytes.NewReader(j))
	if err != nil || damaged || len(entries) != 39 || used != zeroTail(j) || entries[38].firstSeq != 39 {
		t.Fatalf("reading the live journal: %d entries (damaged %v, %d of %d bytes used, %v), want records 1-39 in 39 entries, up to its zero tail",
			len(entries), damaged, used, len(j), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != 0 {
		t.Fatalf("Close left %d bytes of journal, want none", got)
	}
}

// TestJournalFailure: when the journal write fails, the append fails, its
// log is refused further appends, and no replay brings the records back.
func TestJournalFailure(t *testing.T) {
	dir := t.TempDir()
	fail := false
	s := openJournaled(t, dir, Options{hooks: &fileHooks{journal: func([]byte) error {
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
	s = openJournaled(t, dir, Options{})
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
		if i%2 == 1 { // and the zero tail of a journal written in place
			b = append(b, make([]byte, r.IntN(5000))...)
		}
		entries, _, _, err := readJournal(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if store.CheckAgent(e.agent) != nil || len(e.lines) == 0 {
				t.Fatalf("entry %+v from %x", e, b)
			}
		}
		if i%3 == 2 && len(entries) != 2 {
			t.Fatalf("noise after two good entries lost them: %d entries", len(entries))
		}
	}
}

// sweepImage is a store's files as a kill -9 leaves them: four agents that
// appended concurrently, every append acknowledged and in the journal (no
// checkpoint since the logs were created).
type sweepImage struct {
	files   map[string][]byte // name → content
	acked   map[string]int    // agent → records acknowledged
	durable map[string][]byte // agent → its log as synced before the appends
}

func newSweepImage(t *testing.T, perAgent int) sweepImage {
	dir := t.TempDir()
	agents := []string{"agt_a", "agt_b", "agt_c", "agt_d"}
	s := openJournaled(t, dir, Options{})
	for _, id := range agents {
		mustCreate(t, s, id)
		mustAppend(t, s, id, 0, 2)
	}
	s.Close() // a checkpoint: records 0-1 durable, the journal empty
	img := sweepImage{files: map[string][]byte{}, acked: map[string]int{}, durable: map[string][]byte{}}
	for _, id := range agents {
		img.durable[id] = readFile(t, s.Path(id))
	}
	s = openJournaled(t, dir, Options{})
	var wg sync.WaitGroup
	for _, id := range agents {
		wg.Go(func() {
			for seq := 2; seq < 2+perAgent; seq++ {
				mustAppend(t, s, id, uint64(seq), 1)
			}
		})
	}
	wg.Wait()
	// Each agent's last entry comes after every place the sweep damages, so
	// a record lost from both copies is always followed by one that shows the
	// gap. (Without a later entry the loss looks like an unacknowledged torn
	// write and cannot be told apart: D40 (a damaged journal never removes an intact record).)
	for _, id := range agents {
		mustAppend(t, s, id, uint64(2+perAgent), 1)
	}
	for _, id := range agents {
		img.acked[id] = 3 + perAgent
		img.files[id+Ext] = readFile(t, s.Path(id))
	}
	journal := readFile(t, filepath.Join(dir, JournalName))
	// The journal as a crash leaves it, its zero tail cut to 4 KiB (the sweep
	// damages its entries; a reader of each image need not read 1 MiB of
	// zeros).
	if used := zeroTail(journal); len(journal) > used+4096 {
		journal = journal[:used+4096]
	}
	img.files[JournalName] = journal
	s.Close()
	return img
}

// write puts the image in dir with the journal replaced by journal and, if
// lostTails, the logs cut back to what was durable (a machine crash: the
// journal was the only copy of their tails).
func (img sweepImage) write(t *testing.T, dir string, journal []byte, lostTails bool) {
	for name, b := range img.files {
		if id, ok := strings.CutSuffix(name, Ext); ok && lostTails {
			b = img.durable[id]
		}
		if name == JournalName {
			b = journal
		}
		writeFile(t, filepath.Join(dir, name), b)
	}
}

// check opens dir (read-only, then, if writer, as the next writer) and checks every
// agent: each record it shows is the one acknowledged; with the logs intact,
// all are there; a record it lacks is reported as damage naming the agent and
// the first missing seq. It returns the records reported lost.
func (img sweepImage) check(t *testing.T, dir, what string, intactLogs, writer bool) int {
	t.Helper()
	lost := 0
	modes := []bool{true}
	if writer {
		modes = append(modes, false)
	}
	for _, ro := range modes {
		s, err := Open(dir, Options{ReadOnly: ro, Sync: SyncJournal})
		if err != nil {
			t.Fatalf("%s: open (read-only %v): %v", what, ro, err)
		}
		for id, n := range img.acked {
			got := 0
			err := s.Scan(id, func(seq uint64, r []byte) error {
				if !bytes.Equal(r, rec(id, seq)) {
					return fmt.Errorf("record %d is %q", seq, r)
				}
				got++
				return nil
			})
			var damage *store.DamageError
			switch {
			case got == n && err == nil:
			case intactLogs:
				t.Fatalf("%s (read-only %v): %s shows %d of %d records (%v); its log held them all", what, ro, id, got, n, err)
			case !errors.As(err, &damage) || damage.Agent != id || damage.Seq != uint64(got):
				t.Fatalf("%s (read-only %v): %s shows %d of %d records, and the loss is reported as %v, want damage of %s at seq %d",
					what, ro, id, got, n, err, id, got)
			default:
				if ro {
					lost += n - got
				}
			}
		}
		s.Close()
	}
	return lost
}

// TestJournalDamageSweep: a journal damaged anywhere in its middle (each byte
// flipped in turn; a 4 KiB block zeroed at several places) never costs a
// record that is intact in its log (docs/log.md, D40 (a damaged journal never removes an intact record)); with the logs' tails lost
// too (a machine crash), every record lost from both copies is reported as
// damage naming the agent and its first missing seq, never silently. A reader
// shows the log the next writer's replay makes (the same planReplay), so every
// offset is checked read-only, and every writerEvery-th one (the replay
// syncs: the cost of the test) by a writer too.
func TestJournalDamageSweep(t *testing.T) {
	perAgent, window, stride, writerEvery := 60, 640, 1, 4
	if testing.Short() {
		perAgent, window, stride, writerEvery = 40, 256, 3, 4
	}
	img := newSweepImage(t, perAgent)
	journal := img.files[JournalName]
	used := zeroTail(journal) // the entries; a zero tail follows them
	if used < 3*4096 {
		t.Fatalf("journal entries of %d bytes: too small for the sweep", used)
	}
	dir := t.TempDir()
	damaged := make([]byte, len(journal))
	mid := used/2 - window/2
	flips, lost := 0, 0
	for off := mid; off < mid+window; off += stride {
		copy(damaged, journal)
		damaged[off] ^= 0xff
		for _, lostTails := range []bool{false, true} {
			img.write(t, dir, damaged, lostTails)
			lost += img.check(t, dir, fmt.Sprintf("byte %d of %d flipped (tails lost %v)", off, used, lostTails), !lostTails, flips%writerEvery == 0)
		}
		flips++
	}
	for _, off := range []int{used / 5, used/3 + 1, used/2 - 2048, used - 4096 - 8191} {
		copy(damaged, journal)
		clear(damaged[off : off+4096])
		for _, lostTails := range []bool{false, true} {
			img.write(t, dir, damaged, lostTails)
			lost += img.check(t, dir, fmt.Sprintf("4 KiB zeroed at byte %d of %d (tails lost %v)", off, used, lostTails), !lostTails, true)
		}
	}
	if lost == 0 {
		t.Fatal("no record was ever lost from both copies: the sweep does not reach the journal's records")
	}
	t.Logf("%d flips in %d bytes of journal entries (1 in %d also replayed by a writer) and 4 zeroed blocks: nothing intact lost; %d records not shown, each loss reported at its first missing seq",
		flips, used, writerEvery, lost)
}
