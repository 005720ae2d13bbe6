package file

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

// TestFileIndexReopen: the indexes outlive the store, through the index file
// or, when it is missing or damaged, rebuilt from the logs.
func TestFileIndexReopen(t *testing.T) {
	for _, damage := range []string{"kept", "missing", "crashed", "damaged", "stale"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s := openFile(t, dir, Options{})
			storetest.Fleet(t, s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			idx := filepath.Join(dir, IndexName)
			if _, err := os.Stat(idx); err != nil {
				t.Fatalf("no index file after Close: %v", err)
			}
			switch damage {
			case "missing":
				os.Remove(idx)
			case "crashed":
				// What a writer leaves when it crashes: the file renamed at open.
				os.Rename(idx, idx+".open")
			case "damaged":
				os.WriteFile(idx, []byte(`{"version":1,"agents":[{"agent":"../x"`), 0o644)
			case "stale":
				// The file says every log is shorter than it is: each is read again.
				os.WriteFile(idx, []byte(`{"version":1,"agents":[{"agent":"agt_00","status":"alive","count":1,"size":3},{"agent":"agt_gone","status":"alive","count":1,"size":3}],"pending":[{"agent":"agt_00","request_id":"q","seq":9,"tool":"t","args":{},"at":""}]}`), 0o644)
			}
			s = openFile(t, dir, Options{})
			storetest.WantFleet(t, storetest.Default.Lists, s)
			if diff, err := s.CheckIndex(); err != nil || len(diff) != 0 {
				t.Errorf("CheckIndex: %q, %v", diff, err)
			}
			if _, err := os.Stat(idx + ".open"); damage != "stale" && damage != "damaged" && err != nil {
				t.Errorf("an open writer left no %s.open: %v", IndexName, err)
			}
		})
	}
}

// TestFileIndexChangedBehindTheStore: after a crash (the index file not
// marked clean) a log that grew is read again at open; after a clean close
// the file is trusted, and CheckIndexOf (verify) finds what it missed;
// CheckIndex finds what an open store missed.
func TestFileIndexChangedBehindTheStore(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	storetest.Fleet(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "agt_02"+Ext), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(storetest.Action(2, "late", "deploy", `{}`, "pending"), '\n'))
	f.Close()
	s = openFile(t, dir, Options{ReadOnly: true})
	if diff, _ := s.CheckIndexOf("agt_02"); len(diff) == 0 {
		t.Error("CheckIndexOf found nothing of a log changed behind a cleanly closed store")
	}
	s.Close()
	// A crash: the writer renamed the clean file to .open when it opened.
	if err := os.Rename(filepath.Join(dir, IndexName), filepath.Join(dir, IndexName+".open")); err != nil {
		t.Fatal(err)
	}
	s = openFile(t, dir, Options{})
	rows := storetest.AllPending(t, storetest.Default.Lists, s, 10)
	if len(rows) != 4 || rows[1] != `agt_02 nagt_02 late 2 deploy 7 2026-12-02T03:00:02Z {}` {
		t.Errorf("pending after a change behind the store: %q", rows)
	}
	if diff, _ := s.CheckIndex(); len(diff) != 0 {
		t.Errorf("CheckIndex: %q", diff)
	}
	// Behind the open store's back: CheckIndex says so.
	os.WriteFile(filepath.Join(dir, "agt_05"+Ext), append(storetest.Genesis("agt_05", "other"), '\n'), 0o644)
	if diff, _ := s.CheckIndex(); len(diff) != 1 {
		t.Errorf("CheckIndex after a log was replaced: %q", diff)
	}
}

// TestFileIndexCheckIndexOf: an index file that lies about a log of the size
// it noted is caught by CheckIndexOf (what `lineagec verify` runs).
func TestFileIndexCheckIndexOf(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, Options{})
	storetest.Fleet(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, IndexName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"name":"nagt_02"`), []byte(`"name":"wrong!!"`), 1)
	os.WriteFile(path, b, 0o644)
	s = openFile(t, dir, Options{ReadOnly: true})
	defer s.Close()
	if diff, err := s.CheckIndexOf("agt_02"); err != nil || len(diff) != 1 || !strings.Contains(diff[0], "wrong!!") {
		t.Errorf("CheckIndexOf(agt_02) = %q, %v; want the wrong name", diff, err)
	}
	if diff, err := s.CheckIndexOf("agt_01"); err != nil || len(diff) != 0 {
		t.Errorf("CheckIndexOf(agt_01) = %q, %v", diff, err)
	}
}
