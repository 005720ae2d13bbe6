package file

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/runtime/store"
)

var syncModes = []SyncMode{SyncFiles, SyncFS, SyncJournal}

func openFile(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFile(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			testStore(t, func(t *testing.T) store.Store {
				return openFile(t, t.TempDir(), Options{Sync: mode})
			})
		})
		// Every new log in a shard directory, and the first two in the
		// directory itself, then the others in shard directories.
		for _, after := range []int{-1, 2} {
			t.Run(fmt.Sprintf("%v/ShardAfter=%d", mode, after), func(t *testing.T) {
				testStore(t, func(t *testing.T) store.Store {
					return openFile(t, t.TempDir(), Options{Sync: mode, ShardAfter: after})
				})
			})
		}
	}
}

func TestFileSyncMode(t *testing.T) {
	for _, mode := range []SyncMode{SyncDefault, SyncFiles, SyncFS, SyncJournal} {
		s := openFile(t, t.TempDir(), Options{Sync: mode})
		got := s.SyncMode()
		s.Close()
		if got != SyncFiles && got != SyncFS && got != SyncJournal || mode != SyncDefault && got != mode && runtime.GOOS == "linux" {
			t.Errorf("Options{Sync: %v}: store uses %v", mode, got)
		}
		if mode == SyncDefault {
			t.Logf("default sync mode here: %v", got)
		}
	}
}

func TestFileReopen(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	for _, id := range []string{"agt_b", "agt_a"} {
		mustCreate(t, s, id)
		mustAppend(t, s, id, 0, 3)
	}
	mustCreate(t, s, "agt_empty")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openFile(t, dir, Options{})
	defer s.Close()
	// An empty log is a create whose first records never became durable
	// (D41: crash-safe create): not listed, though it can still be read and appended to.
	ids, err := s.Agents()
	if err != nil || strings.Join(ids, ",") != "agt_a,agt_b" {
		t.Fatalf("Agents() = %q, %v", ids, err)
	}
	// Append first, without a Scan: the store learns the length by itself.
	if err := s.Append("agt_a", 2, rec("agt_a", 2)); !errors.Is(err, store.ErrSeq) {
		t.Fatalf("replay after reopen: %v, want ErrSeq", err)
	}
	mustAppend(t, s, "agt_a", 3, 2)
	wantLog(t, s, "agt_a", 5)
	wantLog(t, s, "agt_b", 3)
	wantLog(t, s, "agt_empty", 0)
	mustAppend(t, s, "agt_empty", 0, 1)
	if ids, err := s.Agents(); err != nil || strings.Join(ids, ",") != "agt_a,agt_b,agt_empty" {
		t.Fatalf("Agents() after the first append to agt_empty = %q, %v", ids, err)
	}
	if err := s.Create("agt_a"); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create after reopen: %v, want ErrExists", err)
	}
}

// TestFileDeletedBehindBack deletes an open log's file: the store does not
// write into the unlinked file after the agent is created again.
func TestFileDeletedBehindBack(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	defer s.Close()
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 2)
	if err := os.Remove(filepath.Join(dir, "agt_a.jsonl")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 1)
	data, err := os.ReadFile(filepath.Join(dir, "agt_a.jsonl"))
	if want := string(rec("agt_a", 0)) + "\n"; err != nil || string(data) != want {
		t.Fatalf("file = %q, %v; want %q", data, err, want)
	}
}

// TestFileFormat pins the bytes on disk: one line per record, nothing else.
func TestFileFormat(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	defer s.Close()
	mustCreate(t, s, "agt_a")
	if err := s.Append("agt_a", 0, []byte(`{"seq":0}`), []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("agt_a", 2, []byte(`{"seq":2}`)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "agt_a.jsonl"))
	if want := "{\"seq\":0}\n{\"seq\":1}\n{\"seq\":2}\n"; err != nil || string(got) != want {
		t.Fatalf("file = %q, %v; want %q", got, err, want)
	}
}

// TestFileCloseWaits closes the store under appends: each Append either
// completes (and is in the log) or returns ErrClosed, nothing in between.
func TestFileCloseWaits(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	const agents = 20
	acked := make([]uint64, agents)
	var wg sync.WaitGroup
	for i := range agents {
		id := fmt.Sprintf("agt_%02d", i)
		mustCreate(t, s, id)
		wg.Go(func() {
			for seq := uint64(0); ; seq++ {
				err := s.Append(id, seq, rec(id, seq))
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				acked[i] = seq + 1
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s = openFile(t, dir, Options{})
	defer s.Close()
	for i := range agents {
		wantLog(t, s, fmt.Sprintf("agt_%02d", i), int(acked[i]))
	}
}

// TestFileTornTail cuts the file at every byte of its last record, as a crash
// in the middle of a write may, and checks that each reopen sees the records
// before it, and that the next Append replaces the torn bytes. (A cut of the
// newline alone leaves a whole record: TestFileMissingNewline.)
func TestFileTornTail(t *testing.T) {
	const n = 6
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, n)
	s.Close()
	path := filepath.Join(dir, "agt_a.jsonl")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := rec("agt_a", n-1)
	start := len(orig) - len(last) - 1
	if !bytes.Equal(orig[start:], append(bytes.Clone(last), '\n')) {
		t.Fatalf("unexpected file layout %q", orig)
	}
	next := []byte(`{"new":1}`) // shorter than the torn bytes: they must be cut, not overwritten
	for cut := start; cut < len(orig)-1; cut++ {
		if err := os.WriteFile(path, orig[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		s := openFile(t, dir, Options{})
		wantLog(t, s, "agt_a", n-1)
		if err := s.Append("agt_a", n-1, next); err != nil {
			t.Fatalf("cut at %d: Append: %v", cut, err)
		}
		got := scanAll(t, s, "agt_a")
		if len(got) != n || !bytes.Equal(got[n-1], next) {
			t.Fatalf("cut at %d: %d records, last %q", cut, len(got), got[len(got)-1])
		}
		s.Close()
		data, _ := os.ReadFile(path)
		if want := string(orig[:start]) + string(next) + "\n"; string(data) != want {
			t.Fatalf("cut at %d: file = %q, want %q", cut, data, want)
		}
	}
}

func writeLog(t *testing.T, dir, agent, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, agent+Ext), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileDamage(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("b", store.MaxRecord)
	cases := []struct {
		name, content string
		good          int    // records passed to fn before the error
		reason        string // "" for no error
	}{
		{"empty_middle", "r0\nr1\n\nr3\n", 2, "empty line"},
		{"empty_first", "\nr1\n", 0, "empty line"},
		{"empty_last", "r0\n\n", 1, "empty line"},
		{"junk", "r0\n\x00\xff\xfe junk \x01\nr2\n", 3, ""},
		{"junk_torn", "r0\n\x00\x00\x00", 1, ""},
		{"max_line", "r0\n" + big + "\nr2\n", 3, ""},
		{"long_line", "r0\n" + big + "bb\nr2\n", 1, "line longer than the limit"},
		{"long_torn", "r0\n" + big + "bb", 1, "line longer than the limit"},
	}
	for _, c := range cases {
		writeLog(t, dir, "agt_"+c.name, c.content)
	}
	s := openFile(t, dir, Options{})
	defer s.Close()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent := "agt_" + c.name
			n := 0
			err := s.Scan(agent, func(seq uint64, r []byte) error {
				n++
				return nil
			})
			if n != c.good {
				t.Errorf("fn saw %d records, want %d", n, c.good)
			}
			if c.reason == "" {
				if err != nil {
					t.Fatalf("Scan: %v", err)
				}
				return
			}
			var de *store.DamageError
			if !errors.As(err, &de) || !errors.Is(err, store.ErrDamaged) || de.Seq != uint64(c.good) {
				t.Fatalf("Scan: %v, want a DamageError at record %d", err, c.good)
			}
			prefix := fmt.Sprintf("store: %s: record %d: %s", agent, c.good, c.reason)
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, filepath.Join(dir, agent+Ext)) {
				t.Fatalf("error %q: want it to start %q and name the file", msg, prefix)
			}
			// Appending to a damaged log would bury the damage: refused.
			if err := s.Append(agent, uint64(c.good), []byte("x")); !errors.Is(err, store.ErrDamaged) {
				t.Fatalf("Append to a damaged log: %v, want ErrDamaged", err)
			}
		})
	}
}

func TestFileAgentsIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"notes.txt", ".hidden.jsonl", "bad id.jsonl", "agt_a.jsonl.tmp", ".jsonl"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeLog(t, dir, "agt_a", "r0\n")
	s := openFile(t, dir, Options{})
	defer s.Close()
	ids, err := s.Agents()
	if err != nil || strings.Join(ids, ",") != "agt_a" {
		t.Fatalf("Agents() = %q, %v", ids, err)
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", file, filepath.Join(file, "sub")} {
		s, err := Open(d, Options{})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", d)
			continue
		}
		if d != "" && !strings.Contains(err.Error(), d) {
			t.Errorf("Open(%q): %v: does not name the directory", d, err)
		}
	}
	nested := filepath.Join(dir, "a", "b")
	s := openFile(t, nested, Options{})
	defer s.Close()
	if st, err := os.Stat(nested); err != nil || !st.IsDir() {
		t.Fatalf("Open did not create %s: %v", nested, err)
	}
	ents, _ := os.ReadDir(nested)
	for _, e := range ents {
		if e.Name() != LockName && e.Name() != JournalName {
			t.Fatalf("Open left files behind besides its lock and journal: %v", ents)
		}
	}
}

// TestFileLock: one writer owns a directory; readers share it with each other.
func TestFileLock(t *testing.T) {
	dir := t.TempDir()
	w := openFile(t, dir, Options{})
	if err := w.Create("agt_a"); err != nil {
		t.Fatal(err)
	}
	if err := w.Append("agt_a", 0, []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a second writer: %v, want ErrLocked", err)
	}
	if s, err := Open(dir, Options{ReadOnly: true}); !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a reader while a writer holds the directory: %v, want ErrLocked", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r1 := openFile(t, dir, Options{ReadOnly: true})
	r2 := openFile(t, dir, Options{ReadOnly: true})
	n := 0
	if err := r2.Scan("agt_a", func(uint64, []byte) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("read-only scan: %d records, %v", n, err)
	}
	if err := r1.Append("agt_a", 1, []byte(`{"x":2}`)); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("append on a read-only store: %v, want ErrReadOnly", err)
	}
	if err := r1.Create("agt_b"); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("create on a read-only store: %v, want ErrReadOnly", err)
	}
	if s, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a writer while readers hold the directory: %v, want ErrLocked", err)
	}
	r1.Close()
	r2.Close()
	w2 := openFile(t, dir, Options{})
	if err := w2.Append("agt_a", 1, []byte(`{"x":2}`)); err != nil {
		t.Fatalf("a writer after the readers left: %v", err)
	}
	w2.Close()
}

// TestFileDirGone removes the directory under an open store: every call
// fails or succeeds cleanly, none panics.
func TestFileDirGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := openFile(t, dir, Options{})
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 2)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Create("agt_b"); err == nil || !strings.Contains(err.Error(), "agt_b") {
		t.Errorf("Create in a removed directory: %v", err)
	}
	if _, err := s.Agents(); err == nil {
		t.Errorf("Agents of a removed directory succeeded")
	}
	if err := s.Scan("agt_c", func(uint64, []byte) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Scan: %v, want ErrNotFound", err)
	}
	_ = s.Append("agt_a", 2, rec("agt_a", 2)) // the open handle may still work
	// A log gone with acknowledged records is damage Close reports (D250 (a
	// journal outlives a log that lost its records)); nothing else may fail.
	if err := s.Close(); err != nil && (!errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), "agt_a")) {
		t.Errorf("Close: %v", err)
	}
}

func TestFileHandleCap(t *testing.T) {
	const max, agents = 4, 20
	s := openFile(t, t.TempDir(), Options{MaxOpenFiles: max})
	defer s.Close()
	id := func(i int) string { return fmt.Sprintf("agt_%02d", i) }
	for i := range agents {
		mustCreate(t, s, id(i))
	}
	for round := range 4 {
		for i := range agents {
			mustAppend(t, s, id(i), uint64(round), 1)
			if n := s.handles.open(); n > max {
				t.Fatalf("%d files open, want at most %d", n, max)
			}
		}
		for i := range agents {
			wantLog(t, s, id((i*7)%agents), round+1)
		}
	}
}

// TestFileWriteFailure injects a short write: the append fails, the partial
// bytes are cut off, and the same seq can be appended again.
func TestFileWriteFailure(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	injected := errors.New("injected: no space left on device")
	opts := Options{hooks: &fileHooks{
		write: func(agent string, f *os.File, b []byte, off int64) (int, error) {
			if !fail.Load() {
				return f.WriteAt(b, off)
			}
			n, _ := f.WriteAt(b[:len(b)-len(b)/3], off) // whole lines and a torn one
			return n, injected
		},
	}}
	s := openFile(t, dir, opts)
	defer s.Close()
	mustCreate(t, s, "agt_a")
	mustAppend(t, s, "agt_a", 0, 2)
	path := filepath.Join(dir, "agt_a.jsonl")
	before, _ := os.ReadFile(path)

	fail.Store(true)
	recs := [][]byte{rec("agt_a", 2), rec("agt_a", 3), rec("agt_a", 4)}
	err := s.Append("agt_a", 2, recs...)
	if !errors.Is(err, injected) || !strings.Contains(err.Error(), "agt_a") {
		t.Fatalf("Append: %v, want the injected error naming the agent", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatalf("after a failed write the file is %q, want %q", after, before)
	}
	wantLog(t, s, "agt_a", 2)

	fail.Store(false)
	mustAppend(t, s, "agt_a", 2, 3)
	wantLog(t, s, "agt_a", 5)
}

// TestFileSyncFailure injects a failed sync: the append fails, its bytes are
// cut off, the log refuses appends until the store is reopened, and other
// agents carry on.
func TestFileSyncFailure(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			var fail atomic.Bool
			injected := errors.New("injected: EIO")
			opts := Options{Sync: mode, hooks: &fileHooks{
				sync: func(agent string) error {
					if agent == "agt_bad" && fail.Load() {
						return injected
					}
					return nil
				},
			}}
			s := openFile(t, dir, opts)
			for _, id := range []string{"agt_bad", "agt_ok"} {
				mustCreate(t, s, id)
				mustAppend(t, s, id, 0, 2)
			}
			path := filepath.Join(dir, "agt_bad.jsonl")
			before, _ := os.ReadFile(path)

			fail.Store(true)
			if err := s.Append("agt_bad", 2, rec("agt_bad", 2)); !errors.Is(err, injected) {
				t.Fatalf("Append: %v, want the injected error", err)
			}
			fail.Store(false)
			err := s.Append("agt_bad", 2, rec("agt_bad", 2))
			if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Append after a failed sync: %v, want ErrBroken naming %s", err, path)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Fatalf("after a failed sync the file is %q, want %q", after, before)
			}
			wantLog(t, s, "agt_bad", 2) // what was acknowledged is still readable
			mustAppend(t, s, "agt_ok", 2, 1)
			s.Close()

			s = openFile(t, dir, Options{Sync: mode})
			defer s.Close()
			mustAppend(t, s, "agt_bad", 2, 1)
			wantLog(t, s, "agt_bad", 3)
			wantLog(t, s, "agt_ok", 3)
		})
	}
}

// The crash test: a child process (this test binary again) appends from many
// goroutines to many agents and prints each acknowledged append; the parent
// kills it with SIGKILL in the middle of its group commits, then reopens the
// store and checks that every acknowledged record is there, byte for byte,
// and that every log is a prefix of what was attempted.
//
// SIGKILL ends the process, not the machine: the page cache survives, so this
// test cannot tell whether the fsyncs happened. It does prove that no append
// is acknowledged before its batch is committed, that a log never has a hole,
// and that torn writes (large records are cut by the kill) are recovered.

const crashEnv = "BE_CRASHER"

func crashID(i int) string { return fmt.Sprintf("agt_crash%02d", i) }

func crashRec(agent string, seq uint64) []byte {
	n := int(seq * 131 % 400)
	if seq%16 == 15 { // a large write, which a kill can tear
		n = 256<<10 + int(seq%1000)
	}
	return fmt.Appendf(nil, `{"agent":%q,"seq":%d,"pad":"%s"}`, agent, seq, strings.Repeat("p", n))
}

func crasher(dir string) {
	const agents = 48
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := range agents {
		if err := s.Create(crashID(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Stdout.WriteString("CREATED " + crashID(i) + "\n")
	}
	for i := range agents {
		go func() {
			id := crashID(i)
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for seq := uint64(0); ; {
				recs := make([][]byte, 1+rng.IntN(3))
				for j := range recs {
					recs[j] = crashRec(id, seq+uint64(j))
				}
				if err := s.Append(id, seq, recs...); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				seq += uint64(len(recs))
				// One write(2) per line: lines from goroutines do not mix.
				os.Stdout.WriteString("ACK " + id + " " + strconv.FormatUint(seq-1, 10) + "\n")
			}
		}()
	}
	select {}
}

func TestFileCrash(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crasher(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileCrash$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	created := map[string]bool{}
	acked := map[string]uint64{} // agent → highest acknowledged seq
	var acks int
	firstAck := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "CREATED":
				created[f[1]] = true
			case len(f) == 3 && f[0] == "ACK":
				seq, err := strconv.ParseUint(f[2], 10, 64)
				if err != nil {
					readDone <- fmt.Errorf("bad line %q", sc.Text())
					return
				}
				acked[f[1]] = max(acked[f[1]], seq)
				acks++
				once.Do(func() { close(firstAck) })
			}
		}
		readDone <- sc.Err()
	}()
	select {
	case <-firstAck:
		time.Sleep(300 * time.Millisecond)
	case <-time.After(30 * time.Second):
	}
	cmd.Process.Kill() // SIGKILL
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	if st := cmd.ProcessState; st == nil || st.ExitCode() != -1 || acks == 0 {
		t.Fatalf("child did not run until killed (%v, %d acks):\n%s", werr, acks, stderr.Bytes())
	}

	torn := 0
	for id := range created {
		data, err := os.ReadFile(filepath.Join(dir, id+Ext))
		if err != nil {
			t.Fatalf("created %s, but: %v", id, err)
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			torn++
		}
	}

	s := openFile(t, dir, Options{})
	defer s.Close()
	ids, err := s.Agents()
	if err != nil || len(ids) < len(acked) {
		t.Fatalf("Agents() = %d ids, %v; %d had appends acknowledged", len(ids), err, len(acked))
	}
	total := 0
	for _, id := range ids {
		n := uint64(0)
		err := s.Scan(id, func(seq uint64, r []byte) error {
			if !bytes.Equal(r, crashRec(id, seq)) {
				return fmt.Errorf("record %d is %.80q, want %.80q", seq, r, crashRec(id, seq))
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if last, ok := acked[id]; ok && n <= last {
			t.Errorf("%s: %d records, but seq %d was acknowledged", id, n, last)
		}
		if err := s.Append(id, n, crashRec(id, n)); err != nil {
			t.Fatalf("%s: Append after the crash: %v", id, err)
		}
		total += int(n)
	}
	t.Logf("%d agents, %d acknowledged appends, %d records found, %d torn tails recovered", len(ids), acks, total, torn)
}

// TestFileMissingNewline: a final record that lacks only its newline is a
// whole record (D40: a damaged journal never removes an intact record): Scan passes it, ScanFile (what verify of a file reads)
// agrees, and the next Append writes the newline before its records, in
// every sync mode; a crash after that append (the journal replayed) keeps it.
func TestFileMissingNewline(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			const n = 4
			dir := t.TempDir()
			s := openFile(t, dir, Options{Sync: mode})
			mustCreate(t, s, "agt_a")
			mustAppend(t, s, "agt_a", 0, n)
			s.Close()
			path := s.Path("agt_a")
			orig := readFile(t, path)
			writeFile(t, path, orig[:len(orig)-1])

			seen := 0
			torn, err := ScanFile(path, func(seq uint64, r []byte) error {
				if !bytes.Equal(r, rec("agt_a", seq)) {
					t.Errorf("ScanFile: record %d = %q", seq, r)
				}
				seen++
				return nil
			})
			if err != nil || torn != 0 || seen != n {
				t.Fatalf("ScanFile: %d records, %d torn bytes, %v; want %d, 0", seen, torn, err, n)
			}
			s = openFile(t, dir, Options{Sync: mode})
			wantLog(t, s, "agt_a", n)
			mustAppend(t, s, "agt_a", n, 2)
			wantLog(t, s, "agt_a", n+2)
			crashed := t.TempDir() // the files as a kill -9 leaves them
			copyDir(t, dir, crashed)
			s.Close()
			want := string(orig) + string(rec("agt_a", n)) + "\n" + string(rec("agt_a", n+1)) + "\n"
			if got := readFile(t, path); string(got) != want {
				t.Fatalf("file = %q, want %q", got, want)
			}
			// The append did not reach the log (a machine crash): the
			// journal's replay writes the newline too.
			writeFile(t, filepath.Join(crashed, "agt_a"+Ext), orig[:len(orig)-1])
			r := openFile(t, crashed, Options{Sync: mode})
			defer r.Close()
			if _, err := os.Stat(filepath.Join(crashed, JournalName)); err == nil && r.SyncMode() == SyncJournal {
				wantLog(t, r, "agt_a", n+2)
				if got := readFile(t, filepath.Join(crashed, "agt_a"+Ext)); string(got) != want {
					t.Fatalf("replayed file = %q, want %q", got, want)
				}
			} else {
				wantLog(t, r, "agt_a", n)
			}
		})
	}
}

// copyDir copies the regular files of src into dst.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			writeFile(t, filepath.Join(dst, e.Name()), readFile(t, filepath.Join(src, e.Name())))
		}
	}
}

// The create-crash test (docs/log.md, D41 (crash-safe create)): a child process (this test binary
// again) creates agents as the runtime does (Create, then one Append of
// genesis and policy) until it is killed with SIGKILL at a random moment;
// after each kill the next writer opens the store, and every agent it lists
// (those from before and every one whose create was acknowledged) opens with
// its first records whole.

const createEnv = "BE_CREATOR"

func creator(dir, prefix string, shardAfter int) {
	s, err := Open(dir, Options{ShardAfter: shardAfter})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Stdout.WriteString("READY\n")
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s_%04d", prefix, i)
		if err := s.Create(id); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if err := s.Append(id, 0, rec(id, 0), rec(id, 1)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Stdout.WriteString("CREATED " + id + "\n")
	}
}

func TestFileCreateCrash(t *testing.T) {
	if dir := os.Getenv(createEnv); dir != "" {
		after, _ := strconv.Atoi(os.Getenv(createEnv + "_SHARD_AFTER"))
		creator(dir, os.Getenv(createEnv+"_PREFIX"), after)
		return
	}
	// The first logs go in the directory itself, the others in shard
	// directories: kills hit creates of both kinds.
	const trials, shardAfter = 100, 20
	dir := t.TempDir()
	s := openFile(t, dir, Options{ShardAfter: shardAfter})
	before := []string{"agt_old1", "agt_old2", "agt_old3"}
	for _, id := range before {
		mustCreate(t, s, id)
		mustAppend(t, s, id, 0, 5)
	}
	s.Close()
	rng := rand.New(rand.NewPCG(7, 9))
	acked := map[string]bool{}
	emptyLeft := 0
	for trial := range trials {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileCreateCrash$", "-test.count=1", "-test.timeout=60s")
		cmd.Env = append(os.Environ(), createEnv+"="+dir, fmt.Sprintf("%s_PREFIX=agt_t%03d", createEnv, trial),
			fmt.Sprintf("%s_SHARD_AFTER=%d", createEnv, shardAfter))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "READY" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("trial %d: the child did not start: %s", trial, stderr.Bytes())
		}
		lines := make(chan string, 1024)
		go func() {
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		time.Sleep(time.Duration(rng.IntN(8000)) * time.Microsecond)
		cmd.Process.Kill() // SIGKILL
		for l := range lines {
			if id, ok := strings.CutPrefix(l, "CREATED "); ok {
				acked[id] = true
			}
		}
		cmd.Wait()
		if st := cmd.ProcessState; st == nil || st.ExitCode() != -1 {
			t.Fatalf("trial %d: child did not run until killed (%v):\n%s", trial, st, stderr.Bytes())
		}
		for _, pattern := range []string{"", "[0-9a-f][0-9a-f]"} {
			ents, _ := filepath.Glob(filepath.Join(dir, pattern, fmt.Sprintf("agt_t%03d_*", trial)+Ext))
			for _, name := range ents {
				if st, err := os.Stat(name); err == nil && st.Size() == 0 {
					emptyLeft++
				}
			}
		}

		// The next writer: every agent it lists opens with whole records.
		s := openFile(t, dir, Options{ShardAfter: shardAfter})
		ids, err := s.Agents()
		if err != nil {
			t.Fatalf("trial %d: Agents: %v", trial, err)
		}
		listed := map[string]bool{}
		for _, id := range ids {
			listed[id] = true
			n := 0
			err := s.Scan(id, func(seq uint64, r []byte) error {
				if !bytes.Equal(r, rec(id, seq)) {
					return fmt.Errorf("record %d is %q", seq, r)
				}
				n++
				return nil
			})
			if err != nil || n < 2 {
				t.Fatalf("trial %d: %s is listed but opens with %d records: %v", trial, id, n, err)
			}
		}
		for _, id := range before {
			if !listed[id] {
				t.Fatalf("trial %d: %s is no longer listed", trial, id)
			}
		}
		for id := range acked {
			if !listed[id] {
				t.Fatalf("trial %d: %s was created (acknowledged) but is not listed", trial, id)
			}
		}
		s.Close()
	}
	for _, pattern := range []string{createPrefix + "*", filepath.Join("[0-9a-f][0-9a-f]", createPrefix+"*")} {
		if leftovers, _ := filepath.Glob(filepath.Join(dir, pattern)); len(leftovers) > 0 {
			t.Errorf("temporary files left after reopening: %q", leftovers)
		}
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "[0-9a-f][0-9a-f]", "*"+Ext))
	if len(shards) == 0 {
		t.Errorf("no log in a shard directory after %d creates acknowledged (ShardAfter %d)", len(acked), shardAfter)
	}
	t.Logf("%d kills; %d creates acknowledged (%d logs in shard directories); %d empty logs left by a kill between Create and its first records (not listed)", trials, len(acked), len(shards), emptyLeft)
}
