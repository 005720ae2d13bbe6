package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/runtime/store/file"
)

// lockHoldEnv makes TestLockHolder a child that holds a data directory's
// lock (as a writer) until its stdin closes.
const lockHoldEnv = "LINEAGEC_TEST_HOLD_LOCK"

func TestLockHolder(t *testing.T) {
	dir := os.Getenv(lockHoldEnv)
	if dir == "" {
		t.Skip("a helper: holds a lock for TestLockWait")
	}
	st, err := file.Open(dir, file.Options{})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	fmt.Println("HELD")
	io.Copy(io.Discard, os.Stdin)
	st.Close()
	os.Exit(0)
}

// holdLock starts a process that holds dir's lock; release ends it.
func holdLock(t *testing.T, dir string) (pid int, release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHoldEnv+"="+dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "HELD" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the lock holder did not start: %q", sc.Text())
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			in.Close()
			cmd.Wait()
		})
	}
	t.Cleanup(release)
	return cmd.Process.Pid, release
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLockWait (D43: lock waits say so): a command that finds the data directory locked by
// another process says so before it waits (the directory and the holder's
// pid and command), gives up after --lock-timeout with exit 1 and a message
// naming the holder, and goes on once the holder lets go.
func TestLockWait(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("budget: 5\ntools:\n  read: { cost: 0 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--data", data, "agent", "create", "--policy", pol}, &out, &errb); code != 0 {
		t.Fatalf("agent create: exit %d: %s", code, errb.String())
	}
	agent := strings.TrimSpace(out.String())

	pid, release := holdLock(t, data)
	note, err := os.ReadFile(filepath.Join(data, file.LockName))
	if err != nil || !strings.Contains(string(note), "pid "+strconv.Itoa(pid)+"\n") || !strings.Contains(string(note), "TestLockHolder") {
		t.Fatalf("the lock file says %q (%v); want the holder's pid %d and command", note, err, pid)
	}
	holder := regexp.QuoteMeta("pid " + strconv.Itoa(pid) + " (")

	// A writer and a reader both give up, saying who holds the directory.
	for _, args := range [][]string{{"request", agent, "read"}, {"agent", "list"}} {
		out.Reset()
		var stderr syncBuffer
		start := time.Now()
		code := run(append([]string{"--data", data, "--lock-timeout", "1500ms"}, args...), &out, &stderr)
		waited := time.Since(start)
		msg := stderr.String()
		if code != 1 || out.Len() != 0 {
			t.Fatalf("%v: exit %d, stdout %q; want exit 1 and nothing on stdout", args, code, out.String())
		}
		want := "^lineagec: waiting for the data directory " + regexp.QuoteMeta(data) + ": it is in use by " + holder + `.*\(giving up after 1.5s; --lock-timeout\)\n` +
			"lineagec: store: the directory is in use by another process: " + regexp.QuoteMeta(filepath.Join(data, file.LockName)) +
			" is locked by " + holder + `.*; gave up after 1.5s \(--lock-timeout sets how long to wait\)\n$`
		if !regexp.MustCompile(want).MatchString(msg) {
			t.Fatalf("%v: stderr\n%s\nwant it to match\n%s", args, msg, want)
		}
		if waited < 1500*time.Millisecond {
			t.Fatalf("%v: gave up after %v, before the timeout", args, waited)
		}
	}

	// --lock-timeout 0: no wait at all.
	var stderr syncBuffer
	if code := run([]string{"--data", data, "--lock-timeout", "0", "agent", "list"}, &out, &stderr); code != 1 ||
		!regexp.MustCompile("is locked by "+holder).MatchString(stderr.String()) || strings.Contains(stderr.String(), "waiting") {
		t.Fatalf("--lock-timeout 0: exit %d, stderr %q; want exit 1 at once, naming the holder", code, stderr.String())
	}

	// The wait is announced before it ends: the holder lets go only once the
	// message is out, and the command then goes on.
	stderr = syncBuffer{}
	var sout syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"--data", data, "request", agent, "read"}, &sout, &stderr) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "waiting for the data directory") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the wait; stderr %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	if code := <-done; code != 0 || !strings.Contains(sout.String(), `"decision":"allow"`) {
		t.Fatalf("after the holder let go: exit %d, stdout %q, stderr %q", code, sout.String(), stderr.String())
	}
	if note, _ := os.ReadFile(filepath.Join(data, file.LockName)); len(note) != 0 {
		t.Errorf("the lock file still says %q after every writer closed", note)
	}
}
